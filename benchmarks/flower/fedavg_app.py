"""The Flower side of ``benchmarks/vs_flower.py``: FedAvg in Flower's simulation engine.

Runs in the Flower virtual environment that ``vs_flower.py`` creates (Flower and NumPy
only: this project's packages are not importable there)::

    python fedavg_app.py --data job.npz --rounds 20 --out result.json [--client-cpus 1]

``job.npz`` is written by ``vs_flower.py`` from this project's world of the same
scenario: every device's training rows (``x`` [N, 784] float32, ``y`` [N], device k's
rows ``offsets[k]:offsets[k+1]``, the partition of the scenario's seed), the test set
(``x_test``, ``y_test``), the initial weights ``w0`` (this project's flat layout: per
layer the kernel [n_in, n_out] row-major, then the bias), ``layer_sizes``,
``learning_rate`` and ``local_steps``.

The ClientApp is Flower's Message API (``@app.train()``): device ``partition-id``
takes the global weights, runs ``local_steps`` full-batch gradient steps of plain SGD on
its mean cross-entropy (a NumPy MLP, ReLU, float32: the same steps as this project's
``LocalSGD``) and replies with its weights and ``num-examples`` = |D_k|. The ServerApp
runs ``flwr.serverapp.strategy.FedAvg`` (every node trains every round, no client
evaluation), which averages the replies weighted by ``num-examples``: pi_k = |D_k| / |D|,
the exact weighted sum of this project's ideal aggregation.

Timing: ``evaluate_fn`` is called by the strategy before round 1 and after every
round's aggregation; it records ``time.perf_counter()`` first, so the round times are
the differences of consecutive calls (the model is evaluated on the test set only after
the last round, after its mark: no round's time holds the evaluation). Written to ``--out``: the round times,
the final accuracy, the seconds of imports and before the first call, and per round the
clients' seconds inside their SGD steps (``compute-s``, summed by the strategy's
``train_metrics_aggr_fn``): the rest of a round is Flower's and Ray's. Ray and the
backend start in a thread beside the ServerApp: round 1 waits for them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import numpy as np

_CACHE: dict = {}


def job(path: str) -> dict:
    """The job file's arrays, loaded once per process (each Ray worker keeps its copy)."""
    if path not in _CACHE:
        with np.load(path) as data:
            _CACHE[path] = {key: data[key] for key in data.files}
    return _CACHE[path]


def unflatten(w: np.ndarray, layer_sizes) -> list[np.ndarray]:
    """[kernel_0, bias_0, kernel_1, ...] from the flat weights (kernels [n_in, n_out])."""
    parts, at = [], 0
    for n_in, n_out in layer_sizes:
        parts.append(w[at:at + n_in * n_out].reshape(n_in, n_out))
        at += n_in * n_out
        parts.append(w[at:at + n_out])
        at += n_out
    if at != w.size:
        raise ValueError(f"weights hold {w.size} values, the layers {at}")
    return parts


def logits(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    h = x
    last = len(params) // 2 - 1
    for i in range(last + 1):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < last:
            h = np.maximum(h, 0.0)
    return h


def sgd_steps(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, lr: float, steps: int):
    """``steps`` full-batch gradient steps on the mean cross-entropy (float32)."""
    params = [p.astype(np.float32, copy=True) for p in params]
    n = x.shape[0]
    layers = len(params) // 2
    for _ in range(steps):
        acts = [x]
        h = x
        for i in range(layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < layers - 1:
                h = np.maximum(h, 0.0)
            acts.append(h)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(n), y] -= 1.0
        g = p / np.float32(n)  # d(mean NLL)/d(logits)
        grads = [None] * len(params)
        for i in reversed(range(layers)):
            grads[2 * i] = acts[i].T @ g
            grads[2 * i + 1] = g.sum(axis=0)
            if i > 0:
                g = (g @ params[2 * i].T) * (acts[i] > 0)
        params = [q - np.float32(lr) * dq for q, dq in zip(params, grads, strict=True)]
    return params


def build_apps(data_path: str, rounds: int, num_nodes: int, record: dict):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context):
        config = msg.content["config"]
        arrays = job(str(config["data"]))
        k = int(context.node_config["partition-id"])
        lo, hi = int(arrays["offsets"][k]), int(arrays["offsets"][k + 1])
        params = msg.content["arrays"].to_numpy_ndarrays()
        started = time.perf_counter()
        if hi > lo:
            params = sgd_steps(params, arrays["x"][lo:hi], arrays["y"][lo:hi],
                               float(config["lr"]), int(config["steps"]))
        compute_s = time.perf_counter() - started
        content = RecordDict({"arrays": ArrayRecord(params),
                              "metrics": MetricRecord({"num-examples": hi - lo, "compute-s": compute_s})})
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    def sum_compute(replies: list, weighting_key: str) -> MetricRecord:
        """The clients' seconds in their SGD steps, summed over the round's replies."""
        del weighting_key
        total = sum(float(reply["metrics"]["compute-s"]) for reply in replies)
        record["compute_s"].append(total)
        return MetricRecord({"compute-s": total})

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        record["marks"].append(time.perf_counter())
        if server_round != rounds:
            return MetricRecord({})
        test = job(data_path)
        params = arrays.to_numpy_ndarrays()
        predicted = logits(params, test["x_test"]).argmax(axis=1)
        accuracy = float(np.mean(predicted == test["y_test"]))
        record["accuracy"] = accuracy
        return MetricRecord({"accuracy": accuracy})

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        arrays = job(data_path)
        initial = unflatten(arrays["w0"], arrays["layer_sizes"])
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0,
                          min_train_nodes=num_nodes, min_available_nodes=num_nodes,
                          train_metrics_aggr_fn=sum_compute)
        record["server_started"] = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(initial),
                       train_config=ConfigRecord({"lr": float(arrays["learning_rate"]),
                                                  "steps": int(arrays["local_steps"]),
                                                  "data": data_path}),
                       num_rounds=rounds, evaluate_fn=evaluate)

    return server_app, client_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--client-cpus", type=float, default=1.0)
    args = parser.parse_args()
    started = time.perf_counter()
    # the apps' functions from the module, not __main__, so that Ray's workers import
    # them (this folder is on PYTHONPATH) and keep job()'s cache between messages
    import fedavg_app
    import flwr
    from flwr.simulation import run_simulation

    data_path = os.path.abspath(args.data)
    num_nodes = int(fedavg_app.job(data_path)["offsets"].size - 1)
    record: dict = {"marks": [], "accuracy": None, "compute_s": []}
    server_app, client_app = fedavg_app.build_apps(data_path, args.rounds, num_nodes, record)
    imported = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_nodes,
                   backend_config={"client_resources": {"num_cpus": args.client_cpus,
                                                        "num_gpus": 0.0}})
    ended = time.perf_counter()
    marks = record["marks"]
    result = {
        "flwr_version": flwr.__version__,
        "numpy_version": np.__version__,
        "round_s": [b - a for a, b in itertools.pairwise(marks)],
        "accuracy": record["accuracy"],
        "client_compute_s": record["compute_s"],
        "import_s": imported - started,
        "startup_s": (marks[0] - imported) if marks else None,
        "shutdown_s": (ended - marks[-1]) if marks else None,
        "total_s": ended - started,
        "num_nodes": num_nodes,
    }
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
