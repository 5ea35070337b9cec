"""The one ipywidgets wrapper of the course: a slider over precomputed frames.

Every widget in the notebooks is this slider over the output of a pure, tested function (tree
replays, page-size views, eviction frames); the slider only picks which frame to display, so nbval
can ignore its output without leaving anything untested.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence


def frame_slider(frames: Sequence[Any] | Mapping[Hashable, Any], description: str = "step",
                 value: Hashable | None = None) -> None:
    """Display a slider and the frame it selects: over indexes for a sequence, over keys for a mapping."""
    import ipywidgets as widgets
    from IPython.display import display

    if not frames:
        raise ValueError("frames must not be empty")
    if isinstance(frames, Mapping):
        options = list(frames)
        slider = widgets.SelectionSlider(options=options, value=options[0] if value is None else value,
                                         description=description, continuous_update=False)
    else:
        slider = widgets.IntSlider(value=0 if value is None else value, min=0, max=len(frames) - 1,
                                   description=description, continuous_update=False)
    out = widgets.Output()

    def show(change: Any = None) -> None:
        out.clear_output(wait=True)
        with out:
            display(frames[slider.value])

    slider.observe(show, names="value")
    show()
    display(widgets.VBox([slider, out]))
