#!/usr/bin/env bash
# The proposed method and every baseline over the same air interface, overlaid (MNIST).
# Issue 5 / the paper's Fig. "Comparison of wireless FL methods" (MNIST): the proposed
# method and every baseline over the same air interface (same devices, data, channels:
# everything derives from the same seed), then one overlay of their curves.
#
#   bash scenarios/compare_mnist.sh            # the paper's MNIST set-up, 200 rounds each
#   ROUNDS=15 bash scenarios/compare_mnist.sh  # a reduced run
#   SEED=2 bash scenarios/compare_mnist.sh     # another realisation of data and channels
#
# Extra arguments are passed to every `cosim run` (e.g. --set power.tx_power_dbm=10).
set -euo pipefail
cd "$(dirname "$0")/.."
COSIM=${COSIM:-cosim}
ROUNDS=${ROUNDS:-200}
SEED=${SEED:-1}
ALGORITHMS=${ALGORITHMS:-"bayes_aircomp fedavg fedprox scaffold fedsmoo fedgmt"}
traces=()
for algorithm in $ALGORITHMS; do
  name="compare_mnist-${algorithm}"
  "$COSIM" run scenarios/paper_mnist.toml --no-plots --overwrite \
    --set "name=\"${name}\"" --set "algorithm.name=\"${algorithm}\"" \
    --set "rounds=${ROUNDS}" --set "seed=${SEED}" --set "eval.every=5" "$@"
  traces+=("runs/${name}-seed${SEED}.h5")
done
"$COSIM" plot "${traces[@]}" --out runs/compare_mnist-figures --labels $ALGORITHMS
