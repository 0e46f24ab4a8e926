"""How the study's plots tell its runs apart: one colour per position method and one line style per
attention variant, the same in every figure, and at most MAX_SERIES lines in a panel.

A config name follows the rule `[transformer_]<attention>[_logn]_<position>`; a run's label adds its
training data and model settings (plan.StudyRun.label, e.g. `+copy50+retrieval50`). The plots of
many runs draw one panel per position method (`method_grid`) and explain the colours and styles in
one legend below the panels (`legend_below`) rather than naming every run over the data.
"""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines as mlines  # pylint: disable=wrong-import-position
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position


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
# One colour per position method and one line style per attention variant, the same in every
# figure of the study (RESULTS.md's and FIELD.md's), so that a reader learns them once.
POSITION_ORDER = ("rope", "alibi", "kerple_log", "hwfa", "rnope_swa", "fire", "xpos", "p_rope",
                  "nope", "fox", "scale_invariant", "sinusoidal", "learned", "randomized_rope",
                  "drope", "cope")
POSITION_COLOURS = dict(zip(POSITION_ORDER, TWENTY_COLOURS))
ATTENTION_STYLES = {
    "baseline": "-", "kna": "--", "cosa_logn": ":", "qknorm": "-.",
    "qkln": (0, (5, 1, 1, 1, 1, 1)), "ssmax": (0, (1, 1, 6, 1)), "stickbreaking": (0, (10, 2, 2, 2)),
    "baseline_logn": (0, (3, 1, 1, 1)), "qna": (0, (2, 2)), "qna_logn": (0, (4, 1, 4, 4)),
    "kna_logn": (0, (6, 1, 1, 1, 1, 1, 1, 1)), "cosa": (0, (1, 3)),
}
LINE_STYLES = tuple(ATTENTION_STYLES.values())
MAX_SERIES = 8  # per panel: more lines than this are not read apart


class RunStyles:
  """A colour per position method (POSITION_COLOURS) and a line style per attention variant
  (ATTENTION_STYLES) for each record of one plot; values outside those tables get looks of their
  own. `positions` lists the plot's position methods in panel order."""

  def __init__(self, records):
    parts = [dict(zip(PARTS, split_run(r))) for r in records]
    def assign(part, fixed, looks):  # known values their fixed look, the others looks left over
      values = _ordered({p[part] for p in parts}, tuple(fixed))
      spare = [look for look in _enough(looks, len(looks) + len(values))
               if look not in fixed.values()]
      unknown = iter(spare)
      return {v: fixed[v] if v in fixed else next(unknown) for v in values}
    self.colour = assign("position", POSITION_COLOURS, TWENTY_COLOURS)
    self.line_style = assign("attention", ATTENTION_STYLES, LINE_STYLES)
    self.positions = list(self.colour)

  def of(self, record) -> dict:
    """matplotlib's keywords for the record's line: color and ls."""
    attention, position, _ = split_run(record)
    return {"color": self.colour[position], "ls": self.line_style[attention]}

  def legend_handles(self) -> list:
    """One entry per colour (position method) and one per line style (attention variant)."""
    return ([mlines.Line2D([], [], color=c, lw=2, label=v) for v, c in self.colour.items()]
            + [mlines.Line2D([], [], color="black", ls=ls, lw=1.2, label=v)
               for v, ls in self.line_style.items()])


PARTS = ("attention", "position", "suffix")  # what split_run returns, by name


def _enough(looks, n):
  """n distinct looks: `looks` while they last, else as many colours from a continuous colour map
  or dash patterns."""
  looks = tuple(looks)
  if n <= len(looks):
    return list(looks[:n])
  if looks[0] in TWENTY_COLOURS:
    return list(looks) + [plt.cm.turbo(i / max(n - 1, 1)) for i in range(n - len(looks))]
  return list(looks) + [(0, (1 + i, 1.5)) for i in range(n - len(looks))]


def method_grid(records, panel_size=(3.4, 2.4), columns=4, **subplot_kw):
  """A figure with one panel per position method of `records`; returns (fig, {position: ax},
  styles). Empty panels of the last row are hidden. ValueError for a panel of more than
  MAX_SERIES records."""
  styles = RunStyles(records)
  crowded = {p: n for p in styles.positions
             if (n := sum(split_run(r)[1] == p for r in records)) > MAX_SERIES}
  if crowded:
    raise ValueError(f"panels of more than {MAX_SERIES} lines: {crowded}; plot fewer runs")
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
