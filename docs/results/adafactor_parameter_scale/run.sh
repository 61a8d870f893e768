#!/bin/bash
# run.sh NAME CORE SCALE: one candidate, pinned to CORE, 20 minutes.
name=$1; core=$2; scale=$3
XLA_FLAGS=--xla_force_host_platform_device_count=1 timeout -s TERM 1200 taskset -c $core \
  .venv/bin/python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin \
  --gin.MODEL_DIR="'/tmp/wt29/af/$name'" --gin.TRAIN_STEPS=100000 --gin.train.eval_every=100 \
  --gin.NetworkConfig.relative_attention=True --gin.NetworkConfig.rms_norm=True \
  --gin.NetworkConfig.gated_mlp=True --gin.NetworkConfig.projection_bias=False \
  --gin.NetworkConfig.scale_attention_logits=False \
  --gin.train.optimizer="@adafactor()" --gin.adafactor.learning_rate="@inverse_sqrt_schedule()" \
  --gin.inverse_sqrt_schedule.peak_learning_rate=1e-3 --gin.adafactor.clipping_threshold=1.0 \
  --gin.adafactor.min_dim_size_to_factor=128 --gin.adafactor.multiply_by_parameter_scale=$scale
