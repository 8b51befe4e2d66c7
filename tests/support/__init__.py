"""Helpers the tests share: builders, bus helpers, clocks, fakes of what is outside
the system, runtime harnesses and child scripts. No test module lives here, and no
test module imports another: what two test modules share lives here."""
