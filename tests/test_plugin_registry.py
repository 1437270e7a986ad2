"""The real registry end to end: `from tinycore import Device` and the PYTHON reference device found by entry point."""

from __future__ import annotations


def test_python_device_end_to_end(run_python, tmp_path):
    code = """
    from tinycore import Device
    from tinycore.device import Device as RegistryDevice
    assert Device is RegistryDevice
    dev = Device["python"]
    assert Device["PYTHON:0"] is dev and dev.device == "PYTHON"
    assert Device["python:1"].device == "PYTHON:1" and Device["PYTHON:1"] is not dev
    assert "PYTHON" in list(Device) and "PYTHON" in Device.installed()
    assert Device.DEFAULT in list(Device)
    record = next(r for r in Device.manager.list_plugins() if r.name == "PYTHON")
    print(record.distribution, record.module, record.state.value, record.api_version)
    """
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tinycore", "tinycore.runtime.python_plugin", "available", "(1,", "0)"]


def test_dev_selects_the_default(run_python, tmp_path):
    out = run_python("from tinycore import Device; print(Device.DEFAULT)", {"DEV": "python:3"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "PYTHON:3"


def test_default_setter_canonicalizes(run_python, tmp_path):
    code = """
    from tinycore import Device
    Device.DEFAULT = "python:0"
    print(Device.DEFAULT, Device[Device.DEFAULT].device)
    """
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PYTHON", "PYTHON"]
