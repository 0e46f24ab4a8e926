"""The study plots' run styles: names split by the config naming rule, labels shortened by what all
runs share, a distinct look for every run of a plot, and the legend kept off the panels."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

from keynorm_jax.study import plot_style  # pylint: disable=wrong-import-position


def record(name, position, label=None):
  rec = {"config_name": name, "config": {"model": {"position": position}}}
  if label is not None:
    rec["label"] = label
  return rec


SPLITS = [  # (config name, position, label, expected (attention, position, suffix))
    ("kna_rope", "rope", None, ("kna", "rope", "")),
    ("transformer_kna_rope", "rope", "transformer_kna_rope+copy50",
     ("kna", "rope", "+copy50")),
    ("baseline_logn_p_rope", "p_rope", None, ("baseline_logn", "p_rope", "")),
    ("stickbreaking_nope", "nope", "stickbreaking_nope+gau_qk=separate+copy50",
     ("stickbreaking", "nope", "+gau_qk=separate+copy50")),
    ("transformer_baseline_kerple_log", "kerple_log", None, ("baseline", "kerple_log", "")),
]


@pytest.mark.parametrize("name,position,label,expected", SPLITS)
def test_split_run_follows_the_naming_rule(name, position, label, expected):
  assert plot_style.split_run(record(name, position, label)) == expected


def test_a_name_without_its_position_is_refused_with_the_rule():
  with pytest.raises(ValueError, match=r"does not end in its position method 'alibi'"):
    plot_style.split_run(record("kna_rope", "alibi"))


def test_short_labels_drop_only_what_every_run_shares():
  recs = [record("transformer_kna_rope", "rope", "transformer_kna_rope+copy10+retrieval50"),
          record("transformer_baseline_alibi", "alibi",
                 "transformer_baseline_alibi+copy50+retrieval50")]
  # "+copy10" and "+copy50" end alike in characters but are different settings: only the whole
  # "+retrieval50" is shared
  assert plot_style.short_labels(recs) == (["kna_rope+copy10", "baseline_alibi+copy50"],
                                           "retrieval50")
  mixed = [record("kna_rope", "rope"), record("transformer_kna_rope", "rope")]
  assert plot_style.short_labels(mixed) == (["kna_rope", "transformer_kna_rope"], "")


def test_every_run_of_a_plot_looks_different_and_the_pair_comes_first():
  recs = [record("qkln_rope", "rope"), record("kna_rope", "rope"), record("baseline_rope", "rope"),
          record("kna_rope", "rope", "kna_rope+copy50"), record("kna_alibi", "alibi")]
  styles = plot_style.RunStyles(recs)
  assert list(styles.colour) == ["baseline", "kna", "qkln"]
  assert styles.positions == ["rope", "alibi"]
  looks = {tuple(sorted((k, str(v)) for k, v in styles.of(r).items())) for r in recs[:4]}
  assert len(looks) == 4
  by_position = plot_style.RunStyles(recs, colour_by="position", style_by="attention",
                                     marker_by="suffix")
  assert by_position.of(recs[1])["marker"] != by_position.of(recs[3])["marker"]
  assert by_position.of(recs[1])["color"] != by_position.of(recs[4])["color"]
  names = [h.get_label() for h in styles.legend_handles()]
  assert names == ["baseline", "kna", "qkln", "text only", "copy50"]


def test_looks_do_not_run_out():
  attentions = ["baseline", "kna", "qna", "cosa", "qkln", "qknorm", "ssmax", "stickbreaking",
                "baseline_logn", "kna_logn", "qna_logn", "cosa_logn"]  # more than the line styles
  positions = [f"position{i}" for i in range(23)]                       # more than the colours
  recs = [record(f"{a}_{p}", p, f"{a}_{p}+setting{i % 12}")
          for i, (a, p) in enumerate(zip(attentions * 2, positions))]
  for parts in [("attention", "suffix", None), ("position", "attention", "suffix")]:
    styles = plot_style.RunStyles(recs, *parts)
    for look in (styles.colour, styles.line_style, styles.marker):
      assert len(set(map(str, look.values()))) == len(look)


def test_the_legend_sits_below_every_panel():
  recs = [record(f"kna_{p}", p) for p in ("rope", "alibi", "xpos", "fire", "nope")]
  fig, panels, styles = plot_style.method_grid(recs)
  assert list(panels) == ["rope", "alibi", "fire", "nope", "xpos"]
  assert sum(ax.get_visible() for ax in fig.axes) == 5  # the last row's empty panels hidden
  plot_style.legend_below(fig, styles.legend_handles(), xlabel="position")
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  legend_top = fig.legends[0].get_window_extent(renderer).y1
  assert all(ax.get_tightbbox(renderer).y0 > legend_top for ax in panels.values())
  plt.close(fig)
