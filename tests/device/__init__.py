"""Devices: hardware presets, kernel floors, calibration and measurement on the devices at hand."""
