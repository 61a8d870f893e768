"""The peer watchdog: a lost process is named from the beats it stopped publishing.

The coordination service's key-value store is stood in for by a dict with the
same three calls; the clock is the test's, so nothing here waits.
"""

import pytest

from vmsst.training import distributed


def test_a_peer_is_lost_after_timeout_seconds_without_a_new_beat():
  clock = distributed.PeerClock(timeout=10.0)
  clock.observe({1: "1", 2: "1"}, now=0.0)
  clock.observe({1: "2", 2: "1"}, now=6.0)  # process 2 stands still
  assert clock.lost(now=10.0) == []
  assert clock.lost(now=10.5) == [2]
  clock.observe({1: "3", 2: "2"}, now=11.0)  # it was only slow: silence restarts
  assert clock.lost(now=20.0) == []
  assert clock.lost(now=21.5) == [1, 2]


def test_a_peer_that_exited_on_its_own_counts_only_after_a_failed_collective():
  clock = distributed.PeerClock(timeout=10.0)
  clock.observe({1: distributed._EXITED}, now=0.0)
  assert clock.lost(now=100.0) == []  # finished its run: the watchdog leaves it be
  assert clock.lost(now=0.0, exited_counts=True) == [1]


class DictStore:
  """The client calls PeerWatchdog makes, on a dict shared by the 'processes'."""

  def __init__(self):
    self.values = {}

  def key_value_set(self, key, value, allow_overwrite=False):
    assert allow_overwrite or key not in self.values, key
    self.values[key] = value

  def blocking_key_value_get(self, key, timeout_in_ms):
    del timeout_in_ms
    return self.values[key]

  def key_value_dir_get(self, prefix):
    return [(k, v) for k, v in self.values.items() if k.startswith(prefix + "/")]


def test_the_survivor_prints_one_line_naming_the_lost_process_and_exits_69(capsys, monkeypatch):
  store, exits, now = DictStore(), [], [0.0]
  monkeypatch.setattr(distributed.time, "monotonic", lambda: now[0])
  store.key_value_set("vmsst/host/1", "host b, pid 7")
  store.key_value_set("vmsst/alive/1", "0", allow_overwrite=True)
  survivor = distributed.PeerWatchdog(store, 0, 2, timeout=5.0, exit_fn=exits.append)
  survivor.hosts = {0: "host a, pid 3", 1: "host b, pid 7"}
  assert survivor._check(exited_counts=False) == []
  now[0] = 6.0  # process 1 published nothing since
  lost = survivor._check(exited_counts=False)
  assert lost == [1]
  survivor._exit_naming(lost, None)
  assert exits == [distributed.HOST_LOST_EXIT_CODE] == [69]
  line = capsys.readouterr().err.strip()
  assert "\n" not in line
  assert line.startswith("error: lost process 1 of 2 (host b, pid 7): silent for 5 s;")


def test_the_backstop_heartbeat_outlasts_the_watchdog():
  for timeout in (1, 5, 60):
    assert distributed.backstop_seconds(timeout) > timeout + 5
  with pytest.raises(ValueError, match="--peer_timeout_seconds must be positive"):
    distributed.initialize_distributed(peer_timeout_seconds=0)


def test_after_a_failed_collective_a_peer_that_left_is_named_at_once(capsys):
  store, exits = DictStore(), []
  store.key_value_set("vmsst/alive/0", distributed._EXITED)  # process 0 crashed and left
  survivor = distributed.PeerWatchdog(store, 1, 2, timeout=60.0, exit_fn=exits.append)
  survivor.hosts = {0: "host a, pid 3"}
  survivor.wait_for_lost_peer(RuntimeError("Gloo all-reduce failed: Connection reset by peer"))
  assert exits == [69]
  assert capsys.readouterr().err.startswith(
      "error: lost process 0 of 2 (host a, pid 3): left the job; this process stops too")


class SteppedClock:
  """time.monotonic and time.sleep of the watchdog's module, advanced by the test."""

  def __init__(self, monkeypatch, on_sleep):
    self.now = 0.0
    self._on_sleep = on_sleep
    monkeypatch.setattr(distributed.time, "monotonic", lambda: self.now)
    monkeypatch.setattr(distributed.time, "sleep", self.sleep)

  def sleep(self, seconds):
    self.now += seconds
    self._on_sleep(self.now)


def test_a_killed_peer_is_named_even_when_each_check_is_slow(monkeypatch, capsys):
  """On a loaded host each read of the store can take most of a beat: the wait
  must still outlast `timeout` after the dead peer's last beat was first seen.
  Giving up earlier lets the process exit into JAX's shutdown, which waits for
  the dead peer until the backstop aborts it (SIGABRT, not 69)."""
  exits = []

  class SlowStore(DictStore):
    def key_value_dir_get(self, prefix):
      clock.now += 0.7  # the round trip under load
      return super().key_value_dir_get(prefix)

  store = SlowStore()
  clock = SteppedClock(monkeypatch, lambda now: None)
  store.key_value_set("vmsst/alive/1", "41", allow_overwrite=True)  # its last beat
  survivor = distributed.PeerWatchdog(store, 0, 2, timeout=5.0, exit_fn=exits.append)
  survivor.hosts = {1: "host b, pid 7"}
  survivor.wait_for_lost_peer(RuntimeError("Gloo all-reduce failed"))
  assert exits == [69]
  assert "lost process 1 of 2 (host b, pid 7): silent for 5 s" in capsys.readouterr().err


def test_a_failed_collective_with_every_peer_alive_returns_within_beats(monkeypatch):
  """Not a lost peer: the error goes on up after a beat or two, not after the timeout."""
  store, exits = DictStore(), []
  clock = SteppedClock(monkeypatch, lambda now: store.key_value_set(
      "vmsst/alive/1", str(now), allow_overwrite=True))
  store.key_value_set("vmsst/alive/1", "0", allow_overwrite=True)
  survivor = distributed.PeerWatchdog(store, 0, 2, timeout=60.0, exit_fn=exits.append)
  survivor.wait_for_lost_peer(RuntimeError("some other XLA error"))
  assert exits == [] and clock.now <= 2 * 6.0


def test_any_exception_out_of_the_loop_asks_the_watchdog_but_an_exit_does_not(monkeypatch):
  """A peer killed during a checkpoint's cross-process sync raises a ValueError, not a
  JaxRuntimeError: which error a lost peer causes depends on where this process was."""
  asked = []

  class Recorder:
    def wait_for_lost_peer(self, error):
      asked.append(type(error))

  monkeypatch.setattr(distributed, "_watchdog", Recorder())
  for error in (ValueError("UNKNOWN: Gloo AllGather failed"), RuntimeError("Gloo all-reduce"),
                FloatingPointError("non-finite"), SystemExit(75)):
    with pytest.raises(type(error)):
      with distributed.lost_peers_named():
        raise error
  with distributed.lost_peers_named():
    pass
  assert asked == [ValueError, RuntimeError, FloatingPointError]  # Preempted is a SystemExit


def test_a_peer_that_leaves_during_the_wait_stopped_alongside_and_is_not_blamed(monkeypatch):
  """The same error on every process: a peer that exits after the first check was
  beating after the failure, so this process raises its own error (no exit 69)."""
  store, exits = DictStore(), []
  clock = SteppedClock(monkeypatch, lambda now: store.key_value_set(
      "vmsst/alive/1", distributed._EXITED, allow_overwrite=True))
  store.key_value_set("vmsst/alive/1", "41", allow_overwrite=True)
  survivor = distributed.PeerWatchdog(store, 0, 2, timeout=60.0, exit_fn=exits.append)
  survivor.wait_for_lost_peer(FloatingPointError("non-finite loss"))
  assert exits == [] and clock.now <= 2 * 6.0


def test_after_leaving_the_watchdog_stops_beating_but_still_names_a_silent_peer(monkeypatch):
  """At exit JAX's shutdown barrier waits for every process: a peer killed then is
  named by the watchdog, and the 'exited' beat is never overwritten."""
  store, exits, now = DictStore(), [], [0.0]
  monkeypatch.setattr(distributed.time, "monotonic", lambda: now[0])
  store.key_value_set("vmsst/alive/1", "7", allow_overwrite=True)
  watchdog = distributed.PeerWatchdog(store, 0, 2, timeout=5.0, exit_fn=exits.append)
  assert watchdog._check(exited_counts=False) == []
  watchdog.leave()
  assert store.values["vmsst/alive/0"] == distributed._EXITED
  now[0] = 6.0
  assert watchdog._check(exited_counts=False) == [1]
  assert store.values["vmsst/alive/0"] == distributed._EXITED


def test_after_leaving_an_unreachable_service_ends_the_watch():
  """Once JAX's shutdown is over the service is gone: that loses nobody."""

  class GoneStore(DictStore):
    def key_value_dir_get(self, prefix):
      raise RuntimeError("the client was shut down")

  watchdog = distributed.PeerWatchdog(GoneStore(), 1, 2, timeout=5.0, exit_fn=[].append)
  watchdog.leave()
  assert watchdog._check(exited_counts=False) == []
  assert watchdog._stop.is_set()
