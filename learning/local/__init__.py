"""The proposed method's local training behind one seam: the trainer
(:mod:`.trainer`, ``LocalTrainer``), the maths written once (:mod:`.objective`,
:mod:`.covariance`), and its backends (:mod:`.backend_tensorflow`; :mod:`.backend_numba`
with the fused kernels :mod:`.fused_local`, :mod:`.fused_lrt`, :mod:`.fused_mlp` and the
device loop :mod:`.device_steps`); and FedAvg's and FedProx's steps for the MLP in Numba
(:mod:`.fused_sgd`, ``runtime.backend = "numba"``). Importing the package imports none
of them.
"""
