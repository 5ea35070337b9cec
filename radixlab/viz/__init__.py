"""Pictures of the course: tree drawings, step-through replays and widgets."""

from .trees import TreeDrawing, draw_tree, has_dot, match_path
from .replay import Step, replay, step_through
from .eviction import draw_eviction_state, evict_frames, lifecycle_frames  # notebooks 05, 06
from .widgets import frame_slider

__all__ = ["TreeDrawing", "draw_tree", "has_dot", "match_path", "Step", "replay", "step_through",
           "draw_eviction_state", "evict_frames", "frame_slider", "lifecycle_frames"]
