"""servesim calibration: where cost comes from. Profiles (profiles/*.yaml) are the data
the simulator reads; the harness that measures them needs torch (the `calibrate` extra)
and is imported lazily."""
