"""The measured cost table of :mod:`cosim.study.cost` (written by
``benchmarks/study_cost.py --write``; do not edit by hand): CPU seconds of one
paper-size round (without evaluation) per algorithm and estimator, and of one
evaluation, on one core: ``COST_TABLE`` for the MLP, ``ARCHITECTURE_TABLES`` for
the other architectures (``--architecture NAME``), each with its own reference size."""

COST_TABLE = {
    "measured": "2026-11-27, commit 67b5f89, Intel(R) Xeon(R) Processor, one core per run, CPU time",
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
            "reparameterization": 7.5033,
            "local_reparameterization": 2.3442
        },
        "fedavg": {
            "any": 0.9954
        },
        "fedprox": {
            "any": 1.547
        },
        "scaffold": {
            "any": 1.6138
        },
        "fedsmoo": {
            "any": 3.5547
        },
        "fedgmt": {
            "any": 1.2798
        },
        "signsgd": {
            "any": 0.8576
        }
    },
    "round_core_s_per_sample": {
        "bayes_aircomp": {
            "reparameterization": 0.11599,
            "local_reparameterization": 0.08114
        },
        "fedavg": {
            "any": 0.00494
        },
        "fedprox": {
            "any": 0.00387
        },
        "scaffold": {
            "any": 0.01159
        },
        "fedsmoo": {
            "any": 0.00208
        },
        "fedgmt": {
            "any": 0.00721
        },
        "signsgd": {
            "any": 0.00914
        }
    },
    "run_fixed_core_s": {
        "bayes_aircomp": {
            "reparameterization": 6.841,
            "local_reparameterization": 3.963
        },
        "fedavg": {
            "any": 3.82
        },
        "fedprox": {
            "any": 4.671
        },
        "scaffold": {
            "any": 4.187
        },
        "fedsmoo": {
            "any": 4.38
        },
        "fedgmt": {
            "any": 4.836
        },
        "signsgd": {
            "any": 4.958
        }
    },
    "eval_core_s": {
        "bayes_aircomp": 1.8061,
        "fedavg": 0.08,
        "fedprox": 0.0887,
        "scaffold": 0.0788,
        "fedsmoo": 0.0887,
        "fedgmt": 0.0752,
        "signsgd": 0.1111
    },
    "measured_by_algorithm": {
        "signsgd": "2026-11-28, commit b99308b, AMD EPYC, one core per run, CPU time"
    }
}

ARCHITECTURE_TABLES = {
    "resnet56": {
        "measured": "2026-11-27, commit bb39d40, AMD EPYC, one core per run, CPU time",
        "architectures": [
            "resnet56"
        ],
        "reference": {
            "num_params": 858868,
            "num_devices": 1,
            "local_steps": 30,
            "mc_samples": 1,
            "predictive_samples": 10,
            "test_size": 200,
            "mean_samples_per_device": 100
        },
        "test_set_sizes": {
            "mnist": 10000,
            "cifar100": 10000
        },
        "round_core_s": {
            "bayes_aircomp": {
                "reparameterization": 126.01
            },
            "fedavg": {
                "any": 53.97
            },
            "fedprox": {
                "any": 60.41
            },
            "scaffold": {
                "any": 53.67
            }
        },
        "round_core_s_per_sample": {
            "bayes_aircomp": {
                "reparameterization": 1.1646
            },
            "fedavg": {
                "any": 0.5397
            },
            "fedprox": {
                "any": 0.6041
            },
            "scaffold": {
                "any": 0.5367
            }
        },
        "run_fixed_core_s": {
            "bayes_aircomp": {
                "reparameterization": 49.0
            },
            "fedavg": {
                "any": 22.1
            },
            "fedprox": {
                "any": 20.0
            },
            "scaffold": {
                "any": 22.6
            }
        },
        "eval_core_s": {
            "bayes_aircomp": 9.97,
            "fedavg": 0.87,
            "fedprox": 0.91,
            "scaffold": 0.87
        }
    }
}
