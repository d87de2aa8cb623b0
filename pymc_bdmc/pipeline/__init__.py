"""The one driver (:mod:`.driver`) and the stages it and the methods share.

An estimate goes ``validate -> compile -> data (simulated for BDMC) -> pilot -> frozen plan ->
forward / reverse runs -> bounds -> DataTree``; :func:`.driver.run` calls a method's steps in
that order, and the length search (:mod:`.auto_steps`) repeats the last four. The stages:

* :mod:`.settings`: argument checks (:func:`~.settings.validate`, :class:`~.settings.Settings`,
  :func:`~.settings.parallel_settings`); :mod:`.seeding`: the run's independent random streams;
* :mod:`.compile`: compilation, cached per model structure; :mod:`.problem`: a model's
  compiled densities and its (simulated) data; :mod:`.draws`: exact starting draws and
  ``(theta*, y*)``; :mod:`.matching`: which simulated data set to certify on;
  :mod:`.discrete`: the Gibbs kernel of finite discrete variables;
* :mod:`.pilot`: the pilot run that freezes an :class:`~pymc_bdmc.AnnealingPlan`;
* :mod:`.execution`: timing the kernels to choose fused kernels and worker processes;
* :mod:`.runs`, :mod:`.progress`, :mod:`.interrupts`: the forward and reverse runs with their
  progress rows, step counts and Ctrl-C handling;
* :mod:`.diagnostics` and :mod:`.results`: warnings about the runs, and the attributes every
  result carries.

See ``docs/architecture.md``.
"""
