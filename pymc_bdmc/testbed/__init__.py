"""Estimator testbed: the BDMC paper's experiments (Grosse, Ghahramani & Adams 2015, §6).

Benchmark problems on simulated data (:mod:`.models`), marginal-likelihood estimators behind one
interface (:mod:`.estimators`) and a runner that compares them against BDMC ground truth
(:mod:`.runner`).
"""
