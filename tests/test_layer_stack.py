"""Scanned layers (model.scan_layers) against the plain loop of layers they replace, and
parameters kept in bfloat16 (model.param_dtype)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keynorm_jax import run_config
from keynorm_jax.errors import ConfigError
from keynorm_jax.evaluation.diagnostics import run_diagnostics
from keynorm_jax.models import init_params
from keynorm_jax.training import loop as training
from keynorm_jax.training.metrics_writer import read_metrics
from keynorm_jax.training.optimizer import make_optimizer
from train_helpers import tiny_config


def _two_layers(config):
  """The tiny config with the preset's two layers (tiny_config keeps one where they would be
  alike): a scan of one layer would hide what scanning changes."""
  config.model.num_layers = 2
  return config


def _config(name, scan, **model):
  config = _two_layers(tiny_config(name))
  config.model.scan_layers = scan
  config.model.update(model)
  return run_config.resolve(config)


def _stacked(loop_params):
  """The loop's parameters in the scanned layout: layer_i/... -> layers/layer/... [L, ...]."""
  names = sorted((k for k in loop_params if k.startswith("layer_")), key=lambda k: int(k[6:]))
  out = {k: v for k, v in loop_params.items() if not k.startswith("layer_")}
  out["layers"] = {"layer": jax.tree.map(lambda *a: jnp.stack(a),
                                         *[loop_params[k] for k in names])}
  return out


@pytest.mark.parametrize("name,remat", [("kna_rope", False), ("transformer_cosa_logn_alibi", True),
                                        ("transformer_baseline_kerple_log", False)])
def test_scanned_layers_compute_what_the_loop_computes(name, remat):
  loop, scan = (run_config.build_model(_config(name, s, remat=remat)) for s in (False, True))
  params = init_params(loop, 0, 32)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 48)))
  loss = lambda model, p: jnp.mean(jax.nn.log_softmax(model.apply({"params": p}, tokens)) ** 2)
  apply = lambda model, p: model.apply({"params": p}, tokens)
  np.testing.assert_allclose(jax.jit(apply, static_argnums=0)(scan, _stacked(params)),
                             jax.jit(apply, static_argnums=0)(loop, params), atol=2e-5)
  got = jax.jit(jax.grad(lambda p: loss(scan, p)))(_stacked(params))
  expected = _stacked(jax.jit(jax.grad(lambda p: loss(loop, p)))(params))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-4), got, expected)


def test_scanned_training_with_fsdp_gives_the_loops_losses(tmp_path, monkeypatch, data_dir):
  """Scanned layers, FSDP over 8 devices and the cpu kernel (what `auto` picks on a CPU) give the
  losses of the plain loop of layers with the reference kernel."""
  training.train_and_evaluate(_two_layers(tiny_config(data_dir=data_dir, num_train_steps=3)),
                              tmp_path / "loop")
  loop_model = run_config.build_model(run_config.resolve(_two_layers(tiny_config())))
  monkeypatch.setattr(training, "init_params",
                      lambda model, seed, length: _stacked(init_params(loop_model, seed, length)))
  config = _two_layers(tiny_config(data_dir=data_dir, num_train_steps=3, num_devices=8, fsdp=4))
  config.model.scan_layers = True
  config.model.kernel = "cpu"
  training.train_and_evaluate(config, tmp_path / "scan")
  losses = lambda run: [m["loss"] for m in read_metrics(tmp_path / run)]
  assert len(losses("scan")) == 3
  np.testing.assert_allclose(losses("scan"), losses("loop"), rtol=1e-5)


def test_diagnostics_read_the_scanned_layers():
  loop_config, scan_config = (_config("transformer_kna_rope", s) for s in (False, True))
  params = init_params(run_config.build_model(loop_config), 0, 32)
  tokens = np.random.default_rng(0).integers(0, 256, size=600)
  found = [run_diagnostics(types.SimpleNamespace(config=c, params=p), lengths=[64], tokens=tokens,
                           num_windows=2)[64]["layers"]
           for c, p in ((loop_config, params), (scan_config, _stacked(params)))]
  assert list(found[1]) == ["layer_0", "layer_1"]
  for name in found[0]:
    for key in ("entropy_beyond_train", "raw_key_norm_mean"):
      assert found[1][name][key] == pytest.approx(found[0][name][key], rel=1e-4)
    assert found[1][name]["reach"]["far_mass_beyond_train"] == pytest.approx(
        found[0][name]["reach"]["far_mass_beyond_train"], rel=1e-4, abs=1e-7)


def test_scanning_refuses_layers_that_differ():
  with pytest.raises(ConfigError, match="position='hwfa' gives layer 1 other attention settings"
                                        ".*scan_layers=False"):
    run_config.build_model(_config("baseline_hwfa", True))


def _param_dtype_config(data_dir, dtype):
  config = tiny_config(data_dir=data_dir)
  config.model.param_dtype = dtype
  return config


def test_bfloat16_parameters_and_optimizer_state_train_like_float32(tmp_path, data_dir,
                                                                    straight_run):
  for dtype in ("float32", "bfloat16"):
    resolved = run_config.resolve(_param_dtype_config(data_dir, dtype))
    shapes = jax.eval_shape(lambda: training.init_state(run_config.build_model(resolved),
                                                        make_optimizer(resolved), 0, 32))
    floats = {x.dtype for x in jax.tree.leaves((shapes["params"], shapes["opt_state"]))
              if jnp.issubdtype(x.dtype, jnp.floating)}
    assert floats == {jnp.dtype(dtype)}
  # float32 is tiny_config's own: the session's straight run.
  training.train_and_evaluate(_param_dtype_config(data_dir, "bfloat16"), tmp_path)
  losses = {"float32": [m["loss"] for m in read_metrics(straight_run)],
            "bfloat16": [m["loss"] for m in read_metrics(tmp_path)]}
  assert len(losses["bfloat16"]) == 6
  np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=5e-3)
