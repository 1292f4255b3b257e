"""Sequence numbers reserved ahead of use, per group, so that a loop of ops
pays no coordinator round trip per op: the C++ client's policy
(client/internal/sequence_windows.h), which the two keep alike.

A group's window starts at one number (a single op reserves exactly what it
uses) and doubles each time the client comes back for more, up to
`max_window`. Numbers nobody took for `linger` seconds go back to the
workers (ReleaseSequence) and the window starts again at one, so another
client's later ops wait on ours for at most that long, never for the
workers' gap timeout. Seqs belong to a generation: a window of a generation
the client has left is dropped, not released (its executors are gone).

Plain logic: the coordinator, the workers and the timer are injected, so the
policy is tested without a cluster (tests/test_seq_windows.py).
"""

import threading
import time


class _Window:
    __slots__ = ("generation", "next", "end", "size", "last_use")

    def __init__(self):
        self.generation = None
        self.next = self.end = 0
        self.size = 1
        self.last_use = 0.0


class SequenceWindows:
    """reserve(group, count) -> (first, generation): `count` fresh seqs
    from the coordinator, in its current generation.
    release(group, generation, begin, end): hands [begin, end) back to the
    group's workers; must not block or call back into this object.
    schedule(delay_s, callback): runs callback on another thread later."""

    def __init__(self, reserve, release, schedule=None, *, max_window=256,
                 linger=0.02, clock=time.monotonic):
        self._reserve = reserve
        self._release = release
        self._schedule = schedule or _daemon_timer
        self._max_window = max(1, int(max_window))
        self._linger = linger
        self._clock = clock
        self._lock = threading.Lock()
        self._windows = {}
        self._timer_at = None

    def take(self, group, generation):
        """(seq, generation): a seq of `group` for the caller alone. A window
        held for another generation than `generation` (the client's current
        one) is dropped first. The generation returned is the coordinator's
        when a reservation was made: the caller refreshes its world when it
        differs."""
        with self._lock:
            window = self._windows.setdefault(group, _Window())
            if window.generation != generation:
                window.next = window.end
                window.size = 1
            if window.next >= window.end:
                # Reserving under the lock keeps the group's numbers in the
                # order the callers asked for them.
                first, window.generation = self._reserve(group, window.size)
                window.next, window.end = first, first + window.size
                window.size = min(window.size * 2, self._max_window)
            seq = window.next
            window.next += 1
            window.last_use = self._clock()
            if window.next < window.end and self._timer_at is None:
                self._arm_locked(window.last_use + self._linger)
            return seq, window.generation

    def drop(self, group):
        """After a failed op: gives back what `group` holds and starts again
        at one number, so that the next op asks the coordinator (and learns
        of a re-form) instead of trusting seqs of a world that may be gone."""
        with self._lock:
            window = self._windows.get(group)
            if window is not None:
                self._release_locked(group, window)
                window.size = 1

    def release_all(self):
        """Gives back every unused seq now (the client is closing)."""
        with self._lock:
            for group, window in self._windows.items():
                self._release_locked(group, window)
                window.size = 1

    def held(self, group):
        """The unused seqs of `group` held now, as (begin, end)."""
        with self._lock:
            window = self._windows.get(group)
            return (window.next, window.end) if window else (0, 0)

    def _on_timer(self):
        with self._lock:
            self._timer_at = None
            now = self._clock()
            next_check = None
            for group, window in self._windows.items():
                if window.next >= window.end:
                    continue
                idle_at = window.last_use + self._linger
                if idle_at <= now:
                    self._release_locked(group, window)
                    # An idle client is not in a loop: one number next time.
                    window.size = 1
                elif next_check is None or idle_at < next_check:
                    next_check = idle_at
            if next_check is not None:
                self._arm_locked(next_check)

    def _arm_locked(self, when):
        self._timer_at = when
        self._schedule(max(0.0, when - self._clock()), self._on_timer)

    def _release_locked(self, group, window):
        if window.next < window.end:
            self._release(group, window.generation, window.next, window.end)
        window.next = window.end


def _daemon_timer(delay, callback):
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
