"""The measured cost table of :mod:`cosim.study_cost` (written by
``benchmarks/study_cost.py --write``; do not edit by hand): CPU seconds of one
paper-size round (without evaluation) per algorithm and estimator, and of one
evaluation, on one core."""

COST_TABLE = {
    "measured": "2026-11-25, commit 7d343e6, AMD EPYC, one core per run, CPU time",
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
            "reparameterization": 8.2161,
            "local_reparameterization": 2.2158
        },
        "fedavg": {
            "any": 0.6683
        },
        "fedprox": {
            "any": 0.9671
        },
        "scaffold": {
            "any": 1.0879
        },
        "fedsmoo": {
            "any": 2.2036
        },
        "fedgmt": {
            "any": 0.8901
        }
    },
    "round_core_s_per_sample": {
        "bayes_aircomp": {
            "reparameterization": 0.17578,
            "local_reparameterization": 0.10874
        },
        "fedavg": {
            "any": 0.00852
        },
        "fedprox": {
            "any": 0.00924
        },
        "scaffold": {
            "any": 0.01508
        },
        "fedsmoo": {
            "any": 0.02292
        },
        "fedgmt": {
            "any": 0.00972
        }
    },
    "run_fixed_core_s": {
        "bayes_aircomp": {
            "reparameterization": 4.814,
            "local_reparameterization": 3.479
        },
        "fedavg": {
            "any": 4.55
        },
        "fedprox": {
            "any": 4.619
        },
        "scaffold": {
            "any": 6.863
        },
        "fedsmoo": {
            "any": 5.789
        },
        "fedgmt": {
            "any": 5.246
        }
    },
    "eval_core_s": {
        "bayes_aircomp": 1.7158,
        "fedavg": 0.102,
        "fedprox": 0.1116,
        "scaffold": 0.1066,
        "fedsmoo": 0.1019,
        "fedgmt": 0.1052
    }
}
