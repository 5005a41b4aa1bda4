"""pytest set-up shared by the Python tests."""

import seeding


def pytest_report_header(config):
    return f"FP4MOE_TEST_SEED={seeding.BASE_SEED} (set it to replay this run's inputs)"


def pytest_terminal_summary(terminalreporter):
    # Also under -q, which drops the header: the seed is what a failure needs to be replayed.
    terminalreporter.write_line(f"FP4MOE_TEST_SEED={seeding.BASE_SEED}")
