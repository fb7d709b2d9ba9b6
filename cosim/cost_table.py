"""The measured cost table of :mod:`cosim.study_cost` (written by
``benchmarks/study_cost.py --write``; do not edit by hand): CPU seconds of one
paper-size round (without evaluation) per algorithm and estimator, and of one
evaluation, on one core."""

COST_TABLE = {
    "measured": "2026-11-25, commit 3bbe398, AMD EPYC, one core per run, CPU time",
    "architectures": [
        "mlp"
    ],
    "reference": {
        "num_params": 466698,
        "num_devices": 100,
        "local_steps": 3,
        "mc_samples": 5,
        "predictive_samples": 10,
        "test_size": 10000,
        "mean_samples_per_device": 10
    },
    "test_set_sizes": {
        "mnist": 10000,
        "cifar100": 10000
    },
    "round_core_s": {
        "bayes_aircomp": {
            "reparameterization": 14.4227,
            "local_reparameterization": 7.1017
        },
        "fedavg": {
            "any": 0.8186
        },
        "fedprox": {
            "any": 1.2621
        },
        "scaffold": {
            "any": 1.9542
        },
        "fedsmoo": {
            "any": 3.0174
        },
        "fedgmt": {
            "any": 1.5272
        }
    },
    "round_core_s_per_sample": {
        "bayes_aircomp": {
            "reparameterization": 0.17624,
            "local_reparameterization": 0.13241
        },
        "fedavg": {
            "any": 0.00851
        },
        "fedprox": {
            "any": 0.00672
        },
        "scaffold": {
            "any": 0.00993
        },
        "fedsmoo": {
            "any": 0.0388
        },
        "fedgmt": {
            "any": 0.0
        }
    },
    "eval_core_s": {
        "bayes_aircomp": 1.9054,
        "fedavg": 0.1136,
        "fedprox": 0.1077,
        "scaffold": 0.1268,
        "fedsmoo": 0.1134,
        "fedgmt": 0.1248
    }
}
