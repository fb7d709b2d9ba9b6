"""A scenario's training data split over its devices, without TensorFlow.

:func:`scenario_dataset` loads the ``[data]`` table's dataset and
:func:`scenario_partition` draws its partition from the run's ``"partition"`` stream
(:mod:`native.streams`): the same draw :func:`cosim.world.build_world` makes, so
``cosim validate`` refuses a scenario whose devices need more images of a class than the
training set holds (``cell.num_devices = 10000`` on MNIST's 5,923 zeros, say) before a
run or a study fails at its set-up.
"""

from __future__ import annotations

from learning.data.datasets import Dataset, load_dataset
from learning.data.partition import Partition, PoolExhausted, partition
from native.streams import PARTITION, STATIC_ROUND, numpy_rng


def scenario_dataset(scenario) -> Dataset:
    """The dataset of ``scenario.data`` (cached in-process by the loader)."""
    data = scenario.data
    return load_dataset(
        data.dataset, data_dir=data.data_dir, synthetic_classes=data.synthetic_classes,
        synthetic_shape=tuple(data.synthetic_shape), synthetic_train=data.synthetic_train_size,
        synthetic_test=data.synthetic_test_size, seed=scenario.seed)


def scenario_partition(scenario, dataset: Dataset) -> Partition:
    """The devices' local datasets of ``scenario`` over ``dataset``; ``ValueError`` naming
    ``data.partition``, ``data.mean_samples_per_device`` and ``cell.num_devices`` (and
    ``data.disjoint``) with their values when a class's pool cannot feed them."""
    data, num_devices = scenario.data, scenario.cell.num_devices
    try:
        return partition(
            dataset.y_train, dataset.num_classes, num_devices=num_devices, scheme=data.partition,
            mean_samples_per_device=data.mean_samples_per_device,
            size_distribution=data.size_distribution, labels_per_device=data.labels_per_device,
            dirichlet_alpha=data.dirichlet_alpha, disjoint=data.disjoint,
            rng=numpy_rng(scenario.seed, STATIC_ROUND, PARTITION))
    except PoolExhausted as error:  # learning/ speaks of its arguments; name the scenario keys
        if error.disjoint:
            raise ValueError(
                f"data.partition = {data.partition!r}: class {error.label} has {error.available} "
                f"training samples but all devices together need {error.needed}; lower "
                f"data.mean_samples_per_device (now {data.mean_samples_per_device:g}) or "
                f"cell.num_devices (now {num_devices}), or set data.disjoint = false (devices may "
                "then share images)") from error
        raise ValueError(
            f"data.partition = {data.partition!r}: class {error.label} has {error.available} "
            f"training samples but one device needs {error.needed} with data.disjoint = false; "
            f"lower data.mean_samples_per_device (now {data.mean_samples_per_device:g})") from error


def partition_line(scenario, source: str | None = None) -> str:
    """What ``cosim validate`` says of ``scenario``'s partition: the devices, the samples
    they hold and their range per device; :class:`cosim.scenario.ScenarioError` (from
    ``source``) when it cannot be drawn (:func:`scenario_partition`)."""
    from cosim.scenario import ScenarioError

    try:
        sizes = scenario_partition(scenario, scenario_dataset(scenario)).num_samples
    except ValueError as error:
        raise ScenarioError([str(error)], source) from None
    empty = int((sizes == 0).sum())
    return (f"  partition {sizes.size:,} devices hold {int(sizes.sum()):,} training samples "
            f"({int(sizes.min())}-{int(sizes.max())} per device"
            + (f", {empty:,} without any)" if empty else ")"))
