"""Calibration: published measured runs mapped onto the model, efficiency fits, reports."""

from codesign.calibration.fit import Calibration, calibrate, predict_step_times

__all__ = ["Calibration", "calibrate", "predict_step_times"]
