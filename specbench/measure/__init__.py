"""Measuring: the runner and sweep that time both engines, the records they stream to results/, the
metrics and theory that turn raw counts into ratios, and the machine measurements (hardware identity,
pass-cost calibration, noise) that the choices of γ, draft and dtype follow from."""
