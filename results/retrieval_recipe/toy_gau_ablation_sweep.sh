# usage: sweep.sh NAME CONFIG STEPS [overrides...]
# The toy ablation's runner, kept as it ran (toy_gau_ablation_collect.py, in git history at commit
# 0feeca3, says how it was used).
cd ${TREE:-/work/main}
name=$1; cfg=$2; steps=$3; shift 3
rm -rf /tmp/exp/toy/$name
python train.py --config=$cfg --config.data.copy_fraction=1.0 --config.num_train_steps=$steps --config.train_length=128 --config.model.num_layers=2 --config.model.d_model=64 --config.log_every_steps=50 --config.checkpoint_every_steps=100000 --config.eval_every_steps=100000 --config.eval_windows=4 --workdir=/tmp/exp/toy/$name "$@" > /tmp/exp/toy/$name.log 2>&1
python - $name <<'PY'
import sys
from keynorm_jax.training.metrics_writer import read_metrics
ms=[m for m in read_metrics('/tmp/exp/toy/'+sys.argv[1]) if 'accuracy' in m or 'acc' in m]
print(sys.argv[1], ' '.join(f"{m['step']}:{m.get('accuracy', m.get('acc')):.2f}" for m in ms[::4]))
PY
