"""Sequence numbers reserved ahead of use, per group, so that a loop of ops
pays no coordinator round trip per op: the C++ client's policy
(client/internal/sequence_windows.h); both clients run the cases of
tests/spec/sequence_windows.json.

A group's window starts at one number (a single op reserves exactly what it
uses) and doubles each time the client comes back for more, up to
`max_window`. Numbers nobody took for `linger` seconds go back to the
workers (ReleaseSequence) and the window starts again at one, so another
client's later ops wait on ours for at most that long, never for the
workers' gap timeout. Seqs belong to a generation: a window of a generation
the client has left is dropped, not released (its executors are gone).

Reservations are held under a lease (HoldLease), a stream to the
coordinator open while the client lives: when the process dies (killed
mid-loop, say), the coordinator ends the lease and a worker waiting on one
of its numbers skips them at once, not after its gap timeout.

SequenceWindows is plain logic: the coordinator, the workers and the timer
are injected, so the policy is tested without a cluster
(tests/test_seq_windows.py). ClientSequences wires it to a Client.
"""

import secrets
import threading
import time

import grpc

from ccl._errors import CclError, from_rpc_error
from ccl.v1 import coordinator_pb2, worker_pb2


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


class _Lease:
    """The lease a Client's reservations are held under: one HoldLease
    stream, opened at the first reservation and again after it broke."""

    # How long a reservation waits for the coordinator to hold the lease;
    # past it the reservation is made without one.
    OPEN_TIMEOUT_S = 2.0

    def __init__(self, client):
        self._client = client
        self._lock = threading.Lock()
        self._call = None
        self._id = ""
        self._held = None
        self._waited = False
        self._unsupported = False
        self._closing = False
        # A lease that was held ended while the client lives on: the seqs
        # reserved under it may be skipped by the workers by now.
        self.lost = False

    def id(self):
        """The lease id to reserve under, or "" when none could be held
        (a coordinator older than leases, or a host agent)."""
        with self._lock:
            if self._unsupported:
                return ""
            if self._call is not None and self._call.done():
                self._call = None
            if self._call is None:
                self._id = secrets.token_hex(16)
                self._held = threading.Event()
                self._waited = False
                self._call = self._client._coord.HoldLease(
                    coordinator_pb2.HoldLeaseRequest(lease=self._id))
                threading.Thread(target=self._watch,
                                 args=(self._call, self._held),
                                 daemon=True, name="ccl-lease").start()
            if not self._waited:
                # Only the first ask waits: a coordinator that neither
                # answers nor ends the stream must not slow every reserve.
                self._waited = True
                self._held.wait(self.OPEN_TIMEOUT_S)
            if not self._call.done():
                return self._id if self._held.is_set() else ""
            if self._call.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._unsupported = True
            self._call = None
            return ""

    def _watch(self, call, held):
        # The one reply says the lease is held; the stream then stays open
        # until the client closes it or the coordinator goes.
        replied = False
        try:
            for _ in call:
                replied = True
                held.set()
        except grpc.RpcError:
            pass
        if replied and not self._closing:
            self.lost = True
        held.set()

    def take_lost(self):
        lost, self.lost = self.lost, False
        return lost

    def close(self):
        with self._lock:
            self._closing = True
            if self._call is not None:
                self._call.cancel()
                self._call = None


class ClientSequences:
    """A Client's seqs: its windows, reserving from its coordinator and
    giving back to the workers of each group."""

    def __init__(self, client):
        self._client = client
        self._lock = threading.Lock()
        self._ranks = {}      # group name -> its world ranks, for releases
        self._releases = []   # ReleaseSequence calls not known to be done
        self.windows = SequenceWindows(self._reserve, self._release)
        self._lease = _Lease(client)

    def take(self, group):
        """(seq, generation): the next seq of `group` (a Group) for the
        client alone, in its current generation."""
        with self._lock:
            self._ranks[group.name] = list(group.ranks)
        if self._lease.take_lost():
            # Held under a lease whose stream broke: give them back and
            # reserve afresh rather than use seqs the workers may skip.
            self.windows.release_all()
        return self.windows.take(group.name, self._client.generation)

    def drop(self, group_name):
        self.windows.drop(group_name)

    def held(self, group_name):
        return self.windows.held(group_name)

    def close(self):
        """Gives back every unused seq and waits for those calls (a worker
        that is gone makes its call fail, not hang)."""
        self.windows.release_all()
        with self._lock:
            releases, self._releases = self._releases, []
        for future in releases:
            try:
                future.result()
            except grpc.RpcError:
                pass
        self._lease.close()

    def _reserve(self, group_name, count):
        """`count` fresh seqs of a group from the coordinator, in its current
        generation (refreshing the client's world when it moved on)."""
        client = self._client
        request = coordinator_pb2.ReserveSequenceRequest(
            generation=0, group=group_name, count=count,
            lease=self._lease.id())
        try:
            reply = client._coord.ReserveSequence(request,
                                                  timeout=client.timeout)
        except grpc.RpcError as e:
            error = from_rpc_error(
                e, prefix=f"coordinator {client.coordinator}: ")
            # UNAVAILABLE while the world re-forms after a broken
            # communicator: the op waits for the next generation and runs
            # there, rather than failing on what broke before it.
            if e.code() != grpc.StatusCode.UNAVAILABLE or \
                    not client._await_next_generation():
                raise error from None
            try:
                reply = client._coord.ReserveSequence(request,
                                                      timeout=client.timeout)
            except grpc.RpcError as again:
                raise from_rpc_error(
                    again, prefix=f"coordinator {client.coordinator}: "
                ) from None
        if reply.generation != client.generation:
            client.refresh()
        return reply.first, reply.generation

    def _release(self, group_name, generation, begin, end):
        """Tells the group's workers that [begin, end) will carry no op, so
        another client's ops behind them need not wait. Called under the
        windows' lock: starts the calls and returns. A worker that misses
        it skips the seqs after its gap timeout, as for a client that died
        holding them."""
        with self._lock:
            ranks = self._ranks.get(group_name, [])
            self._releases = [f for f in self._releases if not f.done()]
        request = worker_pb2.ReleaseSequenceRequest(
            group=group_name, generation=generation, begin=begin, end=end)
        for rank in ranks:
            try:
                future = self._client._worker(rank).ReleaseSequence.future(
                    request, timeout=self._client.timeout)
            except (CclError, ValueError, RuntimeError):
                continue  # closed, or a rank that left the world
            with self._lock:
                self._releases.append(future)
