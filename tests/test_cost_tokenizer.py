"""Prefill cost model, the cache-driven serving count, and the bytes tokenizer."""

import pytest

from radixlab.sim.cost import measure_prefill_seconds, plot_prefill_scaling, prefill_flops, serve_with_cache
from radixlab.tokenizer import decode, encode


def test_prefill_flops_grows_faster_than_linear_and_cache_saves():
    assert prefill_flops(2048) > 2 * prefill_flops(1024)
    assert prefill_flops(100, n_cached=900) < prefill_flops(1000)
    # splitting a prompt into cached + new costs exactly the same in total
    assert prefill_flops(600) + prefill_flops(400, n_cached=600) == prefill_flops(1000)
    assert prefill_flops(0) == 0


@pytest.mark.parametrize("kwargs, name", [({"n_new": -1}, "n_new"), ({"n_new": 3, "n_cached": 1.5}, "n_cached"),
                                          ({"n_new": 3, "d_model": -2}, "d_model")])
def test_prefill_flops_bad_input(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        prefill_flops(**kwargs)


def test_serve_with_cache_counts_hits_from_a_real_cache():
    prompts = [[1, 2, 3, 4], [1, 2, 3, 9], [7, 8], [1, 2, 3, 4, 5]]
    stats = serve_with_cache(prompts)
    assert stats.hits == [0, 3, 0, 4]
    assert (stats.prompt_tokens, stats.reused_tokens, stats.computed_tokens) == (15, 7, 8)
    assert serve_with_cache(prompts, page_size=2).hits == [0, 2, 0, 4]


def test_measure_prefill_seconds_returns_one_time_per_length():
    times = measure_prefill_seconds([8, 16], d_model=16, n_layers=1, repeats=1)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_tokenizer_round_trip_and_errors():
    assert encode("hé") == [104, 195, 169] and decode(encode("hé")) == "hé"
    with pytest.raises(TypeError, match="text"):
        encode(b"bytes")
    with pytest.raises(ValueError, match="token_ids"):
        decode([300])


def test_plot_prefill_scaling_draws_two_curves():
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_prefill_scaling([8, 16, 32], d_model=16, n_layers=1, repeats=1)
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_ylabel() == "relative to 16 tokens"
    with pytest.raises(ValueError, match="lengths"):
        plot_prefill_scaling([8])


def test_plot_prefill_scaling_plots_the_times_it_is_given():
    """Notebook 00 plots the times its previous cell printed: the last point is that cell's ratio."""
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_prefill_scaling([8, 16, 32], d_model=16, n_layers=1, seconds=[1.0, 2.0, 7.0])
    measured = fig.axes[0].lines[0]
    assert list(measured.get_ydata()) == [0.5, 1.0, 3.5]
    assert "3.5×" in [t.get_text() for t in fig.axes[0].texts]
    with pytest.raises(ValueError, match="seconds"):
        plot_prefill_scaling([8, 16], seconds=[1.0])
    with pytest.raises(ValueError, match="seconds"):
        plot_prefill_scaling([8, 16], seconds=[1.0, 0.0])
