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


def test_a_position_method_has_one_colour_and_an_attention_variant_one_style_in_every_plot():
  recs = [record("qkln_rope", "rope"), record("kna_rope", "rope"), record("baseline_rope", "rope"),
          record("kna_alibi", "alibi")]
  one, other = plot_style.RunStyles(recs), plot_style.RunStyles(recs[::-1][:2])
  assert one.of(recs[1]) == other.of(recs[1]) == {
      "color": plot_style.POSITION_COLOURS["rope"], "ls": plot_style.ATTENTION_STYLES["kna"]}
  assert one.of(recs[3])["color"] != one.of(recs[1])["color"]          # alibi against rope
  assert len({str(one.of(r)) for r in recs[:3]}) == 3                  # three variants of RoPE
  assert one.positions == ["rope", "alibi"]
  names = [h.get_label() for h in one.legend_handles()]
  assert names == ["rope", "alibi", "baseline", "kna", "qkln"]
  assert len(set(plot_style.POSITION_COLOURS.values())) == len(plot_style.POSITION_COLOURS)
  assert len(set(map(str, plot_style.ATTENTION_STYLES.values()))) == len(
      plot_style.ATTENTION_STYLES)


def test_looks_do_not_run_out():
  attentions = [f"variant{i}" for i in range(14)]                  # none in the fixed table
  positions = [f"position{i}" for i in range(23)]                  # more than the colours
  recs = [record(f"{a}_{p}", p) for a, p in zip(attentions * 2, positions)]
  styles = plot_style.RunStyles(recs)
  for look in (styles.colour, styles.line_style):
    assert len(set(map(str, look.values()))) == len(look)
  known = set(map(str, plot_style.ATTENTION_STYLES.values()))
  assert not known & set(map(str, styles.line_style.values()))     # no clash with a fixed style


def test_a_panel_of_more_than_eight_lines_is_refused():
  recs = [record(f"variant{i}_rope", "rope") for i in range(plot_style.MAX_SERIES + 1)]
  with pytest.raises(ValueError, match="panels of more than 8 lines"):
    plot_style.method_grid(recs)


def test_the_legend_sits_below_every_panel():
  recs = [record(f"kna_{p}", p) for p in ("rope", "alibi", "xpos", "fire", "nope")]
  fig, panels, styles = plot_style.method_grid(recs)
  assert list(panels) == ["rope", "alibi", "fire", "xpos", "nope"]  # POSITION_ORDER
  assert sum(ax.get_visible() for ax in fig.axes) == 5  # the last row's empty panels hidden
  plot_style.legend_below(fig, styles.legend_handles(), xlabel="position")
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  legend_top = fig.legends[0].get_window_extent(renderer).y1
  assert all(ax.get_tightbbox(renderer).y0 > legend_top for ax in panels.values())
  plt.close(fig)
