"""The one sampling loop both engines' burst runs use (``harness.burst_run``)."""

from __future__ import annotations

import time

import pytest

from tidegate.harness.burst_run import sample_until_settled


class Away(Exception):
    """Stands for Redis being away during a restart."""


def test_the_disturbance_ticks_even_while_samples_fail_and_failed_samples_are_counted() -> None:
    """A restart makes samples fail; the fault injection must go on regardless."""
    results: list[object] = [Away(), Away(), 1, 2, 3]
    ticks: list[object] = []

    def take() -> object:
        result = results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    samples, skipped = sample_until_settled(
        take=take,  # type: ignore[arg-type]
        settled=lambda s: s == 3,  # type: ignore[comparison-overlap]
        deadline=time.monotonic() + 60,
        interval_s=0.0,
        tick=ticks.append,  # type: ignore[arg-type]
        skip=(Away,),
    )
    assert samples == [1, 2, 3]
    assert skipped == 2
    # Ticked before each of the five attempts, given the last sample taken by then.
    assert ticks == [None, None, None, 1, 2]


def test_an_error_not_named_to_skip_ends_the_run() -> None:
    def take() -> object:
        raise Away

    with pytest.raises(Away):
        sample_until_settled(
            take=take,  # type: ignore[arg-type]
            settled=lambda s: True,
            deadline=time.monotonic() + 60,
            interval_s=0.0,
        )


def test_the_deadline_ends_an_unsettled_run_with_what_was_sampled() -> None:
    seen: list[object] = []
    samples, skipped = sample_until_settled(
        take=lambda: "s",  # type: ignore[arg-type,return-value]
        settled=lambda s: False,
        deadline=time.monotonic() - 1,
        interval_s=0.0,
        on_sample=seen.append,  # type: ignore[arg-type]
    )
    assert samples == ["s"]
    assert seen == ["s"]
    assert skipped == 0
