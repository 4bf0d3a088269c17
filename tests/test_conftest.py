"""tests/conftest.py itself: the markers skip exactly when their requirement is missing here, and
the device fixture runs a test once per device (checked in a child pytest run of sample tests)."""
import importlib.util
import pathlib

import tapegrad as tg

pytest_plugins = ["pytester"]

SAMPLE = '''
import pytest

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.cuda
def test_cuda():
    pass


@pytest.mark.torch
def test_torch():
    import torch  # the marker guarantees it imports


@pytest.mark.cuda
@pytest.mark.torch
def test_torch_cuda():
    import torch
    assert torch.cuda.is_available()


def test_device(device):
    assert device in ("cpu", "cuda:0")
'''


def test_markers_skip_by_availability_and_device_runs_per_device(pytester):
    pytester.makeconftest((pathlib.Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_sample=SAMPLE)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    cuda = tg.is_cuda_available()
    has_torch = importlib.util.find_spec("torch") is not None
    torch_cuda = False
    if cuda and has_torch:
        import torch
        torch_cuda = torch.cuda.is_available()
    expected_passed = 1 + int(cuda) + int(has_torch) + int(torch_cuda) + int(cuda)   # device: cpu (+ cuda:0)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == expected_passed, result.stdout.str()
    assert outcomes.get("skipped", 0) == 4 + int(cuda) - expected_passed, result.stdout.str()
    if not cuda:
        result.stdout.fnmatch_lines(["*needs a CUDA GPU and cupy*"])


SLOW_SAMPLE = '''
import pytest


def test_quick():
    pass


@pytest.mark.slow
def test_long():
    pass
'''


def test_slow_tests_are_left_out_by_default_and_run_with_full_or_an_explicit_m(pytester):
    pytester.makeconftest((pathlib.Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_sample=SLOW_SAMPLE)
    default = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    default.assert_outcomes(passed=1, deselected=1)
    default.stdout.fnmatch_lines(["*1 slow tests left out*--full*"])
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--full").assert_outcomes(passed=2)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "").assert_outcomes(passed=2)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "slow").assert_outcomes(passed=1, deselected=1)
