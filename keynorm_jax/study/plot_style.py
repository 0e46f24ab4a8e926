"""How the study's plots tell its runs apart, so that sixty runs stay readable.

A config name follows the rule `[transformer_]<attention>[_logn]_<position>`; a run's label adds its
training data and model settings (plan.StudyRun.label, e.g. `+copy50+retrieval50`). The plots of
many runs draw one panel per position method (`method_grid`), a colour per attention variant and a
line style per label suffix, and explain the colours and styles in one legend below the panels
(`legend_below`) rather than naming every run over the data.
"""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines as mlines  # pylint: disable=wrong-import-position
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*", "<", ">")
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)),
               (0, (3, 1, 1, 1)), (0, (5, 1, 1, 1, 1, 1, 1, 1)), (0, (2, 2)))
# Listed first, so that they take the first colours and styles in every plot: the study's pair,
# RoPE, and runs trained on text alone.
FIRST = {"attention": ("baseline", "kna"), "position": ("rope",), "suffix": ("",)}


def split_run(record) -> tuple[str, str, str]:
  """(attention variant, position method, label suffix) of a record: `transformer_kna_rope` with
  label `transformer_kna_rope+copy50` gives ('kna', 'rope', '+copy50'); `baseline_logn_p_rope`
  gives ('baseline_logn', 'p_rope', '')."""
  name = record["config_name"]
  position = record["config"]["model"]["position"]
  body = name.removeprefix("transformer_")
  if not body.endswith(f"_{position}"):
    raise ValueError(f"config name {name!r} does not end in its position method {position!r}: "
                     "name configs [transformer_]<attention>[_logn]_<position> (configs/named.py)")
  label = record.get("label", name)
  return body[:-len(position) - 1], position, label[len(name):]


def _ordered(values, first=()):
  return [v for v in first if v in values] + sorted(set(values) - set(first))


# tab20's dark shades (tab10's colours), then its light ones: the first ten of a plot are ten hues.
TWENTY_COLOURS = plt.cm.tab20.colors[::2] + plt.cm.tab20.colors[1::2]
PARTS = ("attention", "position", "suffix")  # what split_run returns, by name


class RunStyles:
  """A colour, a line style and (with marker_by) a marker for each record of one plot, each from
  one part of its split_run: by default the colour tells the attention variant and the line style
  the label suffix. `positions` lists the plot's position methods in panel order."""

  def __init__(self, records, colour_by="attention", style_by="suffix", marker_by=None):
    parts = [dict(zip(PARTS, split_run(r))) for r in records]
    self.colour_by, self.style_by, self.marker_by = colour_by, style_by, marker_by
    def assign(part, looks):  # each value of the part, in order, its own look
      values = _ordered({p[part] for p in parts}, FIRST[part])
      return dict(zip(values, _enough(looks, len(values))))
    self.colour = assign(colour_by, TWENTY_COLOURS)
    self.line_style = assign(style_by, LINE_STYLES)
    self.marker = assign(marker_by, MARKERS) if marker_by else {}
    self.positions = _ordered({p["position"] for p in parts}, FIRST["position"])

  def of(self, record) -> dict:
    """matplotlib's keywords for the record's line: color, ls and, with marker_by, marker."""
    parts = dict(zip(PARTS, split_run(record)))
    style = {"color": self.colour[parts[self.colour_by]],
             "ls": self.line_style[parts[self.style_by]]}
    if self.marker_by:
      style["marker"] = self.marker[parts[self.marker_by]]
    return style

  def legend_handles(self) -> list:
    """One entry per colour and, where there are several, per line style."""
    handles = [mlines.Line2D([], [], color=c, lw=2, label=_name(v)) for v, c in self.colour.items()]
    if len(self.line_style) > 1:
      handles += [mlines.Line2D([], [], color="black", ls=ls, lw=1.2, label=_name(v))
                  for v, ls in self.line_style.items()]
    return handles


def _enough(looks, n):
  """n distinct looks: `looks` while they last, else as many colours from a continuous colour map,
  dash patterns or (marker) numbered symbols."""
  if n <= len(looks):
    return looks[:n]
  if looks is TWENTY_COLOURS:
    return [plt.cm.turbo(i / max(n - 1, 1)) for i in range(n)]
  if looks is LINE_STYLES:
    return [(0, (1 + i, 1.5)) for i in range(n)]
  return [f"${i}$" for i in range(n)]


def _name(part):
  return part.lstrip("+") or "text only"


def method_grid(records, panel_size=(3.4, 2.4), columns=4, **subplot_kw):
  """A figure with one panel per position method of `records`; returns (fig, {position: ax},
  styles). Empty panels of the last row are hidden."""
  styles = RunStyles(records)
  rows = math.ceil(len(styles.positions) / columns)
  fig, axes = plt.subplots(rows, columns, figsize=(panel_size[0] * columns, panel_size[1] * rows),
                           squeeze=False, **subplot_kw)
  flat = list(axes.flat)
  for i, ax in enumerate(flat[len(styles.positions):], start=len(styles.positions)):
    ax.set_visible(False)
    if i >= columns:  # the panel above an empty slot shows its own x tick labels
      flat[i - columns].xaxis.set_tick_params(labelbottom=True)
  panels = dict(zip(styles.positions, flat))
  for position, ax in panels.items():
    ax.set_title(position, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
  return fig, panels, styles


def legend_below(fig, handles, columns=4, fontsize=8, xlabel=None) -> None:
  """The legend under the panels in `columns` columns, and `xlabel` (the panels' shared x label)
  between them, with the figure grown to hold both."""
  rows = math.ceil(len(handles) / columns)
  label_height = 0.3 if xlabel else 0.0
  extra = 0.17 * rows + 0.15 + label_height
  height = fig.get_figheight() + extra
  fig.set_figheight(height)
  fig.tight_layout(rect=(0, extra / height, 1, 1))
  if xlabel:
    fig.text(0.5, (extra - 0.05) / height, xlabel, ha="center", va="top", fontsize=9)
  if handles:
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=fontsize,
               frameon=False, handlelength=4)


def short_labels(records) -> tuple[list[str], str]:
  """Each record's label less the `transformer_` prefix where all have it (a plot's title names the
  architecture) and less the trailing `+` settings all of them end with, and those settings (e.g.
  'copy50+retrieval50'), for the title."""
  labels = [r.get("label", r["config_name"]) for r in records]
  suffixes = [split_run(r)[2].split("+")[1:] for r in records]
  shared = 0
  while suffixes and all(len(s) > shared for s in suffixes) and len(
      {s[len(s) - 1 - shared] for s in suffixes}) == 1:
    shared += 1
  suffix = "".join(f"+{part}" for part in suffixes[0][len(suffixes[0]) - shared:]) if shared else ""
  prefix = "transformer_" if labels and all(l.startswith("transformer_") for l in labels) else ""
  shortened = [l[len(prefix):len(l) - len(suffix)] for l in labels]
  return shortened, suffix.lstrip("+")
