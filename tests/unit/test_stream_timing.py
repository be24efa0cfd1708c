"""How the benches time a stream: per token, whatever the server packs in one chunk."""

from __future__ import annotations

import pytest

from bench.harness import StreamClock, StreamTiming


def test_inter_token_latency_is_per_token_not_per_chunk() -> None:
    # 9 tokens after the first, in 4 chunks: a server that merged tokens is not slower.
    timing = StreamTiming(ttft_ms=40.0, total_ms=130.0, chunks=5, tokens=10)
    assert timing.itl_ms == pytest.approx(10.0)


def test_one_token_has_no_inter_token_latency() -> None:
    assert StreamTiming(ttft_ms=40.0, total_ms=40.0, chunks=1, tokens=1).itl_ms is None


def test_the_queue_path_is_the_first_text_less_the_engines_part() -> None:
    assert StreamTiming(50.0, 90.0, 3, 3, engine_ttft_ms=44.5).queue_path_ms == 5.5
    # Not through llmq: nothing to split.
    assert StreamTiming(50.0, 90.0, 3, 3).queue_path_ms is None


def test_overhead_report_takes_the_queue_path_within_each_request() -> None:
    from bench.overhead import _report
    from schemas.queues import Tier

    direct = [StreamTiming(40.0 + i, 100.0 + i, 4, 4) for i in range(10)]
    # Slower blocks and faster ones: each request's own engine part is taken off.
    queued = [
        StreamTiming(80.0 + i * 10, 200.0, 4, 4, engine_ttft_ms=76.0 + i * 10) for i in range(10)
    ]
    figures = _report(direct, queued, tier=Tier.SMALL, max_tokens=4, blocks=2)
    assert figures["queue_path_ms_p50"] == 4.0
    assert figures["queue_path_ms_p50_ci95"] == [4.0, 4.0]
    assert figures["added_ms_p50"] == 80.0 + 45.0 - (40.0 + 4.5)


def test_clock_counts_chunks_and_takes_the_servers_token_count() -> None:
    clock = StreamClock()
    clock.text()
    clock.text()
    timing = clock.timing(7)
    assert (timing.chunks, timing.tokens) == (2, 7)
    assert 0.0 <= timing.ttft_ms <= timing.total_ms


def test_clock_without_a_token_count_takes_one_per_chunk() -> None:
    clock = StreamClock()
    for _ in range(3):
        clock.text()
    assert clock.timing().tokens == 3


def test_clock_refuses_a_stream_without_text() -> None:
    with pytest.raises(RuntimeError, match="no text"):
        StreamClock().timing(0)


def test_peer_report_gives_token_and_chunk_rates_and_each_rounds_rate() -> None:
    from bench.peer import PeerPlan, SideSamples, _report
    from schemas.queues import Tier

    def side(tok_s: list[float], chunk_s: list[float]) -> SideSamples:
        return SideSamples(
            ttft_ms=[40.0, 42.0], total_ms=[1200.0], itl_ms=[18.0], tok_s=tok_s, chunk_s=chunk_s
        )

    figures = _report(
        {
            "vllm": side([300.0, 460.0], [300.0, 460.0]),
            "llmq": side([440.0, 450.0], [400.0, 410.0]),
        },
        Tier.SMALL,
        PeerPlan(),
    )
    assert figures["llmq_tok_s_16"] == 445.0
    assert figures["llmq_chunk_s_16"] == 405.0
    assert figures["vllm_tok_s_samples"] == [300.0, 460.0]
    assert figures["throughput_ratio"] == round(445.0 / 380.0, 3)
    # Both sides took the same first tokens and totals: their intervals hold 1 and 0.
    low, high = figures["ttft_ratio_ci95"]
    assert low < 1.0 < high
    assert figures["ttft_added_ms_ci95"][0] < 0.0 < figures["ttft_added_ms_ci95"][1]
    assert figures["total_ratio_ci95"] == [1.0, 1.0]


def test_blocks_alternate_which_side_goes_first() -> None:
    from bench.harness import in_block_order

    orders = [in_block_order(["a", "b"], block) for block in range(4)]
    assert orders == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    # Over each pair of blocks, both sides hold each place once.
    assert sum(order.index("a") for order in orders) == sum(order.index("b") for order in orders)
