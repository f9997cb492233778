"""Measuring: the runner and sweep that time both engines, the records they stream to results/, the
metrics that turn raw counts into ratios, what each example records besides its timing (the numerics
classifier at T = 0, the outputs' NLL at T > 0), and the machine measurements (hardware identity, pass-cost
calibration, noise) that the choices of γ, draft and dtype follow from."""
