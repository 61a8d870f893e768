"""Joining a multi-controller job, and leaving it cleanly when a peer is lost.

Every process runs the same `python -m vmsst.train`. Apart from the loop,
which only reads `jax.process_index()` and `jax.process_count()`: a test or
a launcher joins a job without training.

A process killed outright (kill -9, a host gone) makes its peers' next
collective fail at once, and JAX's coordination service declares it dead
only after `heartbeat_timeout_seconds`, then aborts every survivor with a
C++ stack dump (or, without a collective, never: a survivor waits in a
barrier). So each process runs a `PeerWatchdog`: a thread that bumps its
own counter in the coordination service's key-value store and reads
everyone's; a peer whose counter stands still for `peer_timeout_seconds`
is lost, and the survivor prints one line naming it (process index, host
and pid) and exits with `HOST_LOST_EXIT_CODE`. JAX's own heartbeat timeout
is set above that, as the backstop. A lost process 0 takes the
coordination service with it: JAX's client then aborts within seconds
itself, with a line saying the leader task died.
"""

import atexit
import dataclasses
import os
import socket
import sys
import threading
import time
from typing import Callable

import jax
from absl import logging

from vmsst.base import cli

# EX_UNAVAILABLE of sysexits.h: a peer of the job is gone; restart every process.
HOST_LOST_EXIT_CODE = 69
_BEATS = "vmsst/alive"  # key-value directory: one counter per process
_HOSTS = "vmsst/host"  # key-value directory: "host <hostname>, pid <pid>" per process
_EXITED = "exited"  # a process's last beat when it leaves on its own (atexit)

_watchdog: "PeerWatchdog | None" = None


def initialize_distributed(*, coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None,
                           peer_timeout_seconds: float = 60.0) -> None:
  """Joins the multi-controller job: every process runs this same program.

  With no arguments JAX detects the job itself (TPU pod metadata, SLURM
  variables); on other clusters, or several processes on one machine, give
  all three. CPU processes exchange collectives over gloo (the setting only
  concerns the CPU client, so it is harmless on TPU and GPU).

  Args:
    peer_timeout_seconds: a peer silent this long is lost; this process then
      exits with HOST_LOST_EXIT_CODE and one line naming it (the watchdog).
  """
  given = [coordinator_address, num_processes, process_id]
  if any(v is not None for v in given) and any(v is None for v in given):
    raise ValueError("give all of --coordinator_address, --num_processes and --process_id, "
                     "or none of them (auto-detection on TPU pods and SLURM).")
  if peer_timeout_seconds <= 0:
    raise ValueError(f"--peer_timeout_seconds must be positive, got {peer_timeout_seconds}.")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               heartbeat_timeout_seconds=backstop_seconds(peer_timeout_seconds))
  except ValueError as e:  # auto-detection found no job (not on a TPU pod or under SLURM)
    if coordinator_address is not None:
      raise
    raise cli.UserError(
        f"--distributed found no multi-host job here ({e}): on a TPU pod or under SLURM JAX "
        "detects it; elsewhere give --coordinator_address, --num_processes and --process_id, "
        "or drop --distributed for one process.") from e
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  if jax.process_count() > 1:
    start_watchdog(peer_timeout_seconds)


def backstop_seconds(peer_timeout_seconds: float) -> int:
  """JAX's heartbeat timeout: after the watchdog's, so its clear line comes first."""
  return int(2 * peer_timeout_seconds + 10)


@dataclasses.dataclass
class PeerClock:
  """Which peers are lost, from the counters they published (pure: no clock read here).

  A peer is lost when its counter has not changed for `timeout` seconds of
  this process's clock (clocks of other hosts are never compared), or, when
  `exited_counts`, when it has left the job (a survivor whose collective
  failed: that peer will not come back).
  """
  timeout: float
  _seen: dict[int, tuple[str, float]] = dataclasses.field(default_factory=dict)

  def observe(self, beats: dict[int, str], now: float) -> None:
    """Records each peer's counter; a changed one restarts its silence."""
    for process, beat in beats.items():
      if self._seen.get(process, (None, 0.0))[0] != beat:
        self._seen[process] = (beat, now)

  def beats(self) -> dict[int, str]:
    """The last counter seen of each peer."""
    return {p: beat for p, (beat, _) in self._seen.items()}

  def lost(self, now: float, *, exited_counts: bool = False) -> list[int]:
    """Peers silent for more than `timeout` (and those that exited, if asked), sorted."""
    return sorted(p for p, (beat, since) in self._seen.items()
                  if (beat == _EXITED and exited_counts)
                  or (beat != _EXITED and now - since > self.timeout))


class PeerWatchdog:
  """The thread that names a lost peer and exits (module docstring).

  Attributes:
    hosts: {process index: "host <hostname>, pid <pid>"} of every process, read at start.
  """

  def __init__(self, client, process: int, count: int, timeout: float, *,
               exit_fn: Callable[[int], None] = os._exit):
    self._client, self._process, self._count = client, process, count
    self._clock = PeerClock(timeout)
    self._interval = max(0.2, timeout / 10)
    self._stop = threading.Event()
    self._leaving = threading.Event()  # leave() ran: the last beat stays "exited"
    self._publishing = threading.Lock()  # no numbered beat may overwrite "exited"
    self._exiting = threading.Lock()  # the thread and a failed collective may both find the loss
    self._exit = exit_fn
    self._beat = 0
    self.hosts: dict[int, str] = {}
    self._thread = threading.Thread(target=self._run, name="vmsst-peer-watchdog", daemon=True)

  def start(self) -> None:
    """Publishes this host's name, reads everyone's, then watches in the background."""
    self._client.key_value_set(f"{_HOSTS}/{self._process}",
                               f"host {socket.gethostname()}, pid {os.getpid()}")
    for process in range(self._count):
      self.hosts[process] = self._client.blocking_key_value_get(f"{_HOSTS}/{process}",
                                                                300_000)
    self._publish(str(self._beat))
    self._thread.start()

  def leave(self) -> None:
    """At exit: tells the peers this process left on its own, and goes on watching them.

    JAX's shutdown, which runs next, waits in a barrier for every process: a
    peer killed now would hold it there until the backstop aborts this process
    with a stack dump. So the thread still names a silent peer, without beating,
    until the coordination service stops answering (the shutdown is over).
    """
    with self._publishing:
      self._leaving.set()
      try:
        self._publish(_EXITED)
      except Exception:  # pylint: disable=broad-except  # the service may be gone already
        self._stop.set()

  def wait_for_lost_peer(self, error: BaseException) -> None:
    """After the loop raised: exits naming the lost peer once known; returns if none is.

    Any error counts, not only JaxRuntimeError: a peer killed in the middle of a
    checkpoint save fails orbax's cross-process sync with a ValueError.

    Returns as soon as every peer has beaten since the failure (the error was
    not a lost peer). A peer killed outright is named `timeout` after its last
    beat was first seen, and that sighting may come late on a loaded host: the
    wait is counted from this first check, not from the failure, because
    returning too early lets the process exit through JAX's shutdown, which
    waits for the dead peer until the backstop aborts it.

    A peer that had already exited at the first check left the job (its own
    error, printed in its log). One that exits during the wait was beating
    after the failure: the same error stopped it too, so this process raises
    its own error rather than blaming that peer.
    """
    logging.warning("the training loop failed (%s); waiting up to %.0f s for the peer "
                    "watchdog to name a lost process", cli.first_line(error), self._clock.timeout)
    first: dict[int, str] | None = None
    deadline = 0.0
    while True:
      lost = self._check(exited_counts=first is None)
      if lost:
        self._exit_naming(lost, "left the job" if self._all_exited(lost) else None)
        return
      beats = self._clock.beats()
      if first is None:
        first = beats
        deadline = time.monotonic() + 1.5 * self._clock.timeout + 2 * self._interval
      elif first and all(beats.get(p) != beat for p, beat in first.items()):
        return  # every peer is alive (or left alongside this process)
      if time.monotonic() > deadline:
        return
      time.sleep(self._interval)

  def _run(self) -> None:
    while not self._stop.wait(self._interval):
      lost = self._check(exited_counts=False)
      if lost and not self._stop.is_set():
        self._exit_naming(lost, None)
        return

  def _check(self, *, exited_counts: bool) -> list[int]:
    """Beats once and reads every beat; the coordination service unreachable loses process 0."""
    now = time.monotonic()
    try:
      with self._publishing:
        if not self._leaving.is_set():
          self._beat += 1
          self._publish(str(self._beat))
      beats = {int(key.rsplit("/", 1)[-1]): value
               for key, value in self._client.key_value_dir_get(_BEATS)}
    except Exception:  # pylint: disable=broad-except  # the coordination service is gone
      if self._leaving.is_set():  # JAX's shutdown is over, or its own abort names process 0
        self._stop.set()
        return []
      beats = {p: v for p, v in self._clock.beats().items() if p != 0}
    beats.pop(self._process, None)
    self._clock.observe(beats, now)
    return self._clock.lost(now, exited_counts=exited_counts)

  def _all_exited(self, lost: list[int]) -> bool:
    return all(self._clock.beats()[p] == _EXITED for p in lost)

  def _publish(self, value: str) -> None:
    self._client.key_value_set(f"{_BEATS}/{self._process}", value, allow_overwrite=True)

  def _exit_naming(self, lost: list[int], how: str | None) -> None:
    """Prints the line and exits; a second finder waits for the first one's exit."""
    if not self._exiting.acquire(blocking=False):
      threading.Event().wait()
    sys.stderr.write(lost_line(lost, self.hosts, self._count,
                               how or f"silent for {self._clock.timeout:.0f} s") + "\n")
    sys.stderr.flush()
    self._exit(HOST_LOST_EXIT_CODE)


def lost_line(lost: list[int], hosts: dict[int, str], count: int, how: str) -> str:
  """The one line a survivor prints: which processes, on which hosts, and what to do."""
  names = ", ".join(f"process {p} of {count} ({hosts.get(p, 'host unknown')})" for p in lost)
  return (f"error: lost {names}: {how}; this process stops too (exit status "
          f"{HOST_LOST_EXIT_CODE}). Restart every process with the same command to resume "
          "from the last checkpoint.")


def start_watchdog(peer_timeout_seconds: float) -> PeerWatchdog:
  """Starts this process's PeerWatchdog; it says 'exited' when Python exits (leave)."""
  global _watchdog
  from jax._src import distributed as jax_distributed  # pylint: disable=import-outside-toplevel
  _watchdog = PeerWatchdog(jax_distributed.global_state.client, jax.process_index(),
                           jax.process_count(), peer_timeout_seconds)
  _watchdog.start()
  # Registered after jax's own clean-up, so it runs first: the service still answers.
  atexit.register(_watchdog.leave)
  return _watchdog


class lost_peers_named:  # pylint: disable=invalid-name  # used as a context manager
  """Around the training loop: an error raised because a peer died names that peer.

  Every Exception is checked (PeerWatchdog.wait_for_lost_peer): which one a
  dead peer causes depends on where this process was (a step's collective, a
  checkpoint's sync). Without a watchdog (one process) it does nothing.
  """

  def __enter__(self) -> "lost_peers_named":
    return self

  def __exit__(self, exc_type, error, traceback) -> bool:
    if _watchdog is not None and isinstance(error, Exception):
      _watchdog.wait_for_lost_peer(error)
    return False
