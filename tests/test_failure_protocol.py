"""The failure detector's protocol (hpcbsp/runtime/failure/protocol.py) driven by hand: members
exchange datagrams through the test, which loses, reorders, replays and forges them.  The
oracles are hand-computed: which members a member observes, the tick at which a silence passes
the timeout, the datagrams each step must send."""
from __future__ import annotations

import pytest

from hpcbsp.runtime.failure import protocol
from hpcbsp.runtime.failure.protocol import BYE, HB, SILENT, STOPPED, VERDICT, Member, seal, unseal

KEY = bytes(range(32))
P, T = 1.0, 10.0


def job(n: int, now: float = 0.0, k: int = 2) -> list[Member]:
    return [Member(i, n, KEY, P, T, now, k=k) for i in range(n)]


def deliver(members: list[Member], sends, now: float, drop=lambda to, data: False) -> list:
    """Deliver ``sends`` (and what they cause) until nothing more is sent; returns every send."""
    every, queue = [], list(sends)
    while queue:
        to, data = queue.pop(0)
        every.append((to, data))
        if not drop(to, data):
            queue.extend(members[to].receive(data, now))
    return every


def kind(data: bytes) -> int:
    opened = unseal(KEY, data)
    assert opened is not None
    return opened[0]


def test_each_member_observes_its_successors_and_beats_to_its_predecessors():
    m = job(5)
    assert m[0].observed() == [1, 2] and m[0].observers() == [4, 3]
    assert m[4].observed() == [0, 1] and m[4].observers() == [3, 2]
    sends = m[3].tick(0.5)
    assert [to for to, _ in sends] == [2, 1] and all(kind(d) == HB for _, d in sends)
    # A member that said goodbye is skipped: 1's successors become 3 and 4.
    deliver(m, m[2].leave(), 0.6)
    assert 2 in m[1].done and m[1].observed() == [3, 4] and m[3].observers() == [1, 0]


def test_a_silent_member_is_given_up_by_its_nearest_observer_at_the_first_tick_past_the_timeout():
    m = job(4)

    def frozen(to: int, data: bytes) -> bool:
        return to == 2

    for t in range(0, 6):  # everybody beats until t = 5; then member 2 freezes
        for i in range(4):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i + 0.01)
    # member 1 last heard 2 at 5.21 (2 ticked at 5.2).  Its ticks at 6.1 ... 15.1 see at most
    # 9.89 s of silence; at 16.1, 10.89 s > 10: the verdict.
    for t in range(6, 16):
        for i in (0, 1, 3):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i + 0.01, drop=frozen)
        assert all(x.verdict is None for x in m), t
    sends = deliver(m, m[1].tick(16.1), 16.11, drop=frozen)
    assert m[1].verdict == (2, 1, SILENT, pytest.approx(16.1 - 5.21))
    assert m[0].verdict == m[3].verdict == m[1].verdict  # the flood reached the others
    assert m[2].verdict is None  # (it is frozen: nothing delivered to it here)
    # 1 sends its verdict to +1, +2 (2, 3) and its observers (0, 3): 4 datagrams, then the others
    # forward theirs once: 0 to 1 and 2, 3 to 0 and 1.
    assert sum(1 for to, d in sends if kind(d) == VERDICT) == 8


def test_losses_short_of_the_timeout_give_nobody_up():
    m = job(3)
    for t in range(0, 60):
        for i in range(3):
            lost = (t % 20) < 9  # 9 periods of 20 lose every datagram: silences of at most 9.x s
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i + 0.01, drop=lambda to, d: lost)
    assert all(x.verdict is None for x in m)


def test_reordered_datagrams_are_taken_and_replayed_ones_dropped():
    a, b = (Member(i, 2, KEY, P, 1e9, 0.0) for i in range(2))  # (nobody given up here)
    beats = [a.tick(float(t))[0][1] for t in range(5)]
    for data in reversed(beats):  # reordered: all within the window
        b.receive(data, 5.0)
    assert b.counts["received"] == 5 and b.counts["replayed"] == 0
    for data in beats:  # replayed
        b.receive(data, 5.0)
    assert b.counts["replayed"] == 5 and b.counts["received"] == 5
    old = a.tick(5.0)[0][1]
    for t in range(protocol.WINDOW + 1):
        b.receive(a.tick(6.0 + t)[0][1], 6.0)
    b.receive(old, 7.0)  # more than the window behind: dropped
    assert b.counts["replayed"] == 6


def test_a_replayed_heartbeat_does_not_keep_a_dead_member_alive():
    m = job(2)
    deliver(m, m[1].tick(0.0), 0.0)
    captured = m[1].tick(0.5)[0][1]
    for t in range(1, 13):  # member 1 is dead; an attacker replays its last heartbeat every period
        m[0].receive(captured, float(t))
        m[0].tick(float(t))
    assert m[0].counts["replayed"] == 11 and m[0].verdict is not None and m[0].verdict.subject == 1


def test_forged_datagrams_are_dropped_and_counted():
    m = job(3)
    wrong = Member(1, 3, b"k" * 32, P, T, 0.0)
    honest = m[1].tick(0.0)[0][1]
    tampered = honest[:-1] + bytes([honest[-1] ^ 1])
    body = bytes(16)  # a verdict on member 2 spoken by 1, under the wrong key
    forged = [wrong.tick(0.0)[0][1], tampered, seal(b"k" * 32, VERDICT, 1, 99, body), b"hb hpcbsp-node2",
              b"", seal(KEY, HB, 7, 1, b"")[:-1]]
    for data in forged:
        assert m[0].receive(data, 1.0) == []
    assert m[0].counts["forged"] == len(forged) and m[0].counts["received"] == 0
    assert m[0].verdict is None
    # A member index outside the job, under the right key (another job sharing it): forged too.
    m[0].receive(seal(KEY, HB, 7, 1, b""), 1.0)
    assert m[0].counts["forged"] == len(forged) + 1
    # A forged heartbeat does not keep member 1 alive either.
    for t in range(1, 14):
        m[0].receive(seal(b"k" * 32, HB, 1, 100 + t, b""), float(t))
        m[0].tick(float(t))
    assert m[0].verdict is not None and m[0].verdict.subject == 1


def test_a_member_that_comes_back_within_the_timeout_is_kept_and_after_it_hears_the_verdict():
    m = job(3)
    deliver(m, m[1].tick(0.0), 0.0)
    for t in range(1, 10):  # 1 stalls for 9 s: below the timeout
        for i in (0, 2):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i)
    deliver(m, m[1].tick(9.5), 9.5)
    for t in range(10, 20):
        for i in range(3):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i)
    assert all(x.verdict is None for x in m)
    for t in range(20, 32):  # 1 freezes for good ... its observer gives it up
        for i in (0, 2):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i, drop=lambda to, d: to == 1)
    assert m[0].verdict is not None and m[0].verdict.subject == 1 and m[1].verdict is None
    deliver(m, m[1].tick(40.0), 40.0)  # ... and it comes back: its heartbeat is answered
    assert m[1].verdict == m[0].verdict


def test_a_farther_observer_issues_the_verdict_when_the_speaker_does_not():
    m = job(4)
    for i in range(4):
        deliver(m, m[i].tick(0.0), 0.0)
    # 3 is silent to 1 but 2 (its nearest observer, the speaker) still hears it: a partial loss.
    for t in range(1, 20):
        for i in (0, 1, 2):
            deliver(m, m[i].tick(float(t)), float(t))
        deliver(m, m[3].tick(float(t)), float(t), drop=lambda to, d: to == 1)
        if t <= 10 + protocol.FOLLOW:
            assert m[1].verdict is None, t
    assert m[1].verdict is not None and m[1].verdict.subject == 3 and m[1].verdict.speaker == 1
    assert all(x.verdict == m[1].verdict for x in m)


def test_a_member_gives_itself_up_and_the_flood_reaches_every_member_in_log_steps():
    m = job(16)
    sends = m[5].give_up(3.0)
    assert m[5].verdict == (5, 5, STOPPED, 0.0)
    assert sorted(to for to, _ in sends) == sorted([6, 7, 9, 13, 4, 3])  # +1, +2, +4, +8; observers
    deliver(m, sends, 3.0)
    assert all(x.verdict == m[5].verdict for x in m)
    # Each member forwards 4 datagrams (log2 16) when it first learns, then relays to its ring
    # neighbours for RELAY periods, then stays quiet.
    assert all(x.counts["sent"] == 4 for x in m if x.me != 5)
    for r in range(protocol.RELAY):
        assert len(m[0].tick(4.0 + r)) == 4
    assert m[0].tick(10.0) == []


def test_a_goodbye_stops_the_expectation():
    m = job(2)
    deliver(m, m[1].leave(), 0.5)
    for t in range(1, 30):
        m[0].tick(float(t))
    assert m[0].verdict is None and m[0].tick(31.0) == []  # nobody left to beat to


@pytest.mark.parametrize("order", [(2, 3, 4), (4, 3, 2), (4, 2, 3), (2, 4, 3), (3, 4, 2)])
def test_neighbours_that_leave_in_any_order_are_not_waited_for(order):
    # Members 2, 3, 4 of 8 end normally, in ``order``; 1's ranks go on for a minute.  Member 1
    # must learn that all three left (else it gives up a member that has gone) and watch 5 and 6.
    m = job(8)
    gone: set[int] = set()
    for t in range(0, 3):
        for i in range(8):
            deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i)
    for j, who in enumerate(order):
        deliver(m, m[who].leave(), 3.0 + j, drop=lambda to, d: to in gone)
        gone.add(who)
    for t in range(4, 64):
        for i in range(8):
            if i not in gone:
                deliver(m, m[i].tick(t + 0.1 * i), t + 0.1 * i, drop=lambda to, d: to in gone)
    assert {2, 3, 4} <= m[1].done and m[1].observed() == [5, 6]
    assert all(m[i].verdict is None for i in range(8) if i not in gone)


def test_a_key_too_short_or_an_index_outside_the_job_is_refused():
    with pytest.raises(ValueError):
        Member(0, 2, b"short", P, T, 0.0)
    with pytest.raises(ValueError):
        Member(2, 2, KEY, P, T, 0.0)
    assert BYE != HB
