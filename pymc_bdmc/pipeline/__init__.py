"""The stages every driver shares, from the user's arguments to the result.

A run goes ``validate -> compile (cached ModelDensity) -> exact draws -> pilot -> frozen plan ->
forward / reverse runs on a runner -> bounds -> DataTree``. The entry points
(:mod:`pymc_bdmc.sampling`, :mod:`pymc_bdmc.sampling_smc`, :mod:`pymc_bdmc.heldout`) and the
step-method driver (:mod:`pymc_bdmc.step_sampling`) assemble these stages:

* :mod:`.settings`: argument checks (:func:`~.settings.validate`, :class:`~.settings.Settings`,
  :func:`~.settings.parallel_settings`);
* :mod:`.seeding`: the independent random streams of a run;
* :mod:`.start`: compilation (cached per model) and exact starting draws;
* :mod:`.pilot`: the pilot run that freezes an :class:`~pymc_bdmc.AnnealingPlan`;
* :mod:`.execution`: timing the kernels to choose fused kernels and worker processes;
* :mod:`.runs`: the forward and reverse runs (on a runner or in process), with their progress
  rows and Ctrl-C handling;
* :mod:`.progress` and :mod:`.interrupts`: progress rows, step counting, interrupt messages;
* :mod:`.diagnostics` and :mod:`.results`: warnings about the runs (every driver's), and the
  attributes every AIS / SMC result carries;
* :mod:`.ais`: the AIS / BDMC run on the vectorized kernels, assembled from the above.

See ``docs/architecture.md``.
"""
