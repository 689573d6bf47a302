"""Scheduler and KV-slot bookkeeping without a model: admission, budgets, chunking, refusal when
the KV cache is full, cancellation, prefix reuse."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from npu_console.engine.runtime.kv_slots import SlotAllocator, common_prefix_len
from npu_console.engine.runtime.scheduler import Scheduler
from npu_console.engine.runtime.sequence import SeqState, Sequence
from npu_console.engine.runtime.types import SamplingParams


def make(n_slots=4, max_len=64, max_running=16, budget=32, prefix=True):
    alloc = SlotAllocator(n_slots, max_len, prefix_caching=prefix, min_prefix_tokens=2)
    return Scheduler(alloc, max_running=max_running, max_batched_tokens=budget)


def seq(rid, n_prompt, max_tokens=8, first=1):
    return Sequence(rid, list(range(first, first + n_prompt)), SamplingParams(max_tokens=max_tokens))


def run(sched, out, token=999):
    """What the engine does after the runner: advance KV, append a token where one was sampled."""
    for it in out.all:
        sched.advance(it)
        if it.samples:
            it.seq.output_ids.append(token)


def test_admission_respects_max_running_and_slots():
    s = make(n_slots=8, max_running=3)
    for i in range(5):
        s.add(seq(f"r{i}", 4))
    out = s.schedule()
    assert [x.request_id for x in out.admitted] == ["r0", "r1", "r2"]  # arrival order
    assert len(s.running) == 3 and len(s.waiting) == 2
    assert {x.seq.slot for x in out.prefills} == {0, 1, 2}


def test_refusal_when_kv_slots_are_full_then_admission_after_finish():
    s = make(n_slots=2, max_running=16)
    a, b, c = seq("a", 4), seq("b", 4), seq("c", 4)
    for x in (a, b, c):
        s.add(x)
    out = s.schedule()
    assert out.admitted == [a, b]
    run(s, out)
    out = s.schedule()
    assert c.state is SeqState.WAITING and not out.admitted  # no free slot: c waits
    assert [it.seq for it in out.decodes] == [a, b]
    run(s, out)
    s.finish(a, "stop")
    assert s.allocator.num_free == 1  # freed at once, not at the next step
    out = s.schedule()
    assert out.admitted == [c]


def test_request_longer_than_a_slot_is_not_admitted():
    s = make(n_slots=2, max_len=16)
    big = seq("big", 10, max_tokens=10)  # needs 20 rows
    s.add(big)
    assert s.schedule().empty
    assert big.state is SeqState.WAITING


def test_token_budget_chunks_long_prompts_and_samples_only_at_the_end():
    s = make(budget=10)
    long = seq("long", 25)
    s.add(long)
    chunks = []
    while long.is_prefilling:
        out = s.schedule()
        (item,) = out.prefills
        chunks.append((item.start, item.num_tokens, item.samples))
        run(s, out)
    assert chunks == [(0, 10, False), (10, 10, False), (20, 5, True)]
    assert long.output_ids == [999]
    out = s.schedule()
    assert [(d.start, d.num_tokens) for d in out.decodes] == [(25, 1)]


def test_decodes_go_first_and_prefill_gets_the_rest_of_the_budget():
    s = make(budget=8)
    a = seq("a", 3)
    s.add(a)
    run(s, s.schedule())  # a prefilled, now decoding
    b = seq("b", 20, first=100)
    s.add(b)
    out = s.schedule()
    assert [it.seq for it in out.decodes] == [a]
    assert [(it.seq, it.num_tokens) for it in out.prefills] == [(b, 7)]  # 8 - 1 decode token
    assert out.num_tokens == 8


def test_budget_exhausted_stops_admission():
    s = make(budget=6)
    for i in range(3):
        s.add(seq(f"r{i}", 4, first=10 * i + 1))
    out = s.schedule()
    assert [x.request_id for x in out.admitted] == ["r0", "r1"]  # 4 + 2 tokens; r2 waits
    assert [it.num_tokens for it in out.prefills] == [4, 2]


def test_cancel_waiting_and_running():
    s = make(n_slots=1)
    a, b = seq("a", 4), seq("b", 4)
    s.add(a)
    s.add(b)
    run(s, s.schedule())
    s.finish(b, "cancelled")  # still waiting
    assert b not in s.waiting and b.finish_reason == "cancelled"
    s.finish(a, "cancelled")  # running
    assert not s.running and s.allocator.num_free == 1
    assert not s.has_work
    assert s.schedule().empty


def test_the_queue_bound_is_the_engines_not_the_schedulers():
    # the engine owns max_waiting (checked at submit); a scheduler accepts whatever it is given,
    # so a limit changed at run time can never make a queued request fail on the engine thread
    s = make()
    for i in range(300):
        s.add(seq(f"r{i}", 2))
    assert len(s.waiting) == 300 and not hasattr(s, "max_waiting")


def test_prefix_reuse_in_place_from_a_finished_slot():
    s = make(n_slots=2)
    a = seq("a", 10)
    s.add(a)
    run(s, s.schedule())
    a_slot = a.slot
    s.finish(a, "stop")
    b = Sequence("b", list(range(1, 11)) + [50, 51], SamplingParams(max_tokens=4))
    s.add(b)
    out = s.schedule()
    assert a_slot is not None and a.slot is None  # a gave its slot back
    assert [it.seq for it in out.prefills] == [b] and b.slot == a_slot  # b took it, in place
    assert b.num_cached == 10 and b.copy_from is None
    assert (out.prefills[0].start, out.prefills[0].num_tokens) == (10, 2)


def test_prefix_reuse_copies_from_a_busy_slot_and_keeps_one_token_to_run():
    s = make(n_slots=3)
    a = seq("a", 10)
    s.add(a)
    run(s, s.schedule())  # a keeps running with 10 rows written
    b = seq("b", 10)  # identical prompt
    s.add(b)
    out = s.schedule()
    assert b.slot != a.slot
    assert b.copy_from == (a.slot, 9)  # the last prompt token must still run to give logits
    assert b.num_cached == 9
    assert [(it.seq, it.start, it.num_tokens) for it in out.prefills] == [(b, 9, 1)]


def test_no_prefix_reuse_when_disabled_or_too_short():
    s = make(n_slots=2, prefix=False)
    a = seq("a", 10)
    s.add(a)
    run(s, s.schedule())
    s.finish(a, "stop")
    b = seq("b", 10)
    s.add(b)
    s.schedule()
    assert b.num_cached == 0


def test_lru_victim_keeps_the_most_recent_cache_entry():
    alloc = SlotAllocator(2, 64, min_prefix_tokens=2)
    x = Sequence("x", [1, 2, 3, 4], SamplingParams(max_tokens=2))
    y = Sequence("y", [7, 8, 9, 10], SamplingParams(max_tokens=2))
    for s_ in (x, y):
        alloc.allocate(s_)
        s_.num_computed = 4
    alloc.free(x)
    alloc.free(y)
    z = Sequence("z", [20, 21, 22], SamplingParams(max_tokens=2))
    alloc.allocate(z)  # evicts x's entry (older)
    w = Sequence("w", [7, 8, 9, 10, 11], SamplingParams(max_tokens=2))
    assert alloc.allocate(w).cached_tokens == 4


@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), max_size=30),
       st.integers(0, 40))
def test_common_prefix_len_matches_naive(a, b, limit):
    n = 0
    while n < min(len(a), len(b), limit) and a[n] == b[n]:
        n += 1
    assert common_prefix_len(a, b, limit) == n
