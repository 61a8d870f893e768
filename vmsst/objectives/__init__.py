"""Training objectives over the shared VMSST network, one small module each.

`MODELS` is the explicit registry used by gin files and tools that list them.
"""

from vmsst.objectives.bitranslation import BiTranslation
from vmsst.objectives.contrastive import Contrastive
from vmsst.objectives.distillation import Distillation
from vmsst.objectives.entity_contrastive import EntityContrastive
from vmsst.objectives.momentum_contrast import MomentumContrast
from vmsst.objectives.multitask import VMSSTContrastive
from vmsst.objectives.query_tower import QueryTower
from vmsst.objectives.variational import VMSST

MODELS = {
    "vmsst": VMSST,
    "bitranslation": BiTranslation,
    "contrastive": Contrastive,
    "distillation": Distillation,
    "vmsst_contrastive": VMSSTContrastive,
    "momentum_contrast": MomentumContrast,
    "entity_contrastive": EntityContrastive,
    "query_tower": QueryTower,
}
