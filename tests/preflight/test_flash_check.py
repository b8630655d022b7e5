"""Preflight loads flash-attn's compiled extension, so a build for another torch is reported before the first forward.

The mismatch is reproduced for real: a shared library named like the extension that needs a libtorch symbol
the installed torch does not export, as an extension compiled against another torch version does; Python's
import then fails exactly as it does for a mismatched flash-attn ("undefined symbol").
"""

import shutil
import subprocess
import sys

import pytest
import torch

from longctx.preflight.checks.attention import flash_import_failure

SOURCE = """
extern int _ZN3c1015SmallVectorBase_from_another_torchEv(void);  /* a libtorch symbol this torch lacks */
int PyInit_flash_attn_2_cuda(void) { return _ZN3c1015SmallVectorBase_from_another_torchEv(); }
"""


@pytest.fixture
def fake_extension(tmp_path, monkeypatch):
    def build(source: str | None):
        if source is not None:
            if shutil.which("cc") is None:
                pytest.skip("needs a C compiler to build the stand-in extension")
            (tmp_path / "ext.c").write_text(source)
            so = tmp_path / "flash_attn_2_cuda.so"
            subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "ext.c")], check=True)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "flash_attn_2_cuda", raising=False)

    return build


@pytest.mark.subprocess
def test_an_extension_built_for_another_torch_is_an_abi_mismatch(fake_extension):
    fake_extension(SOURCE)
    message, fix = flash_import_failure("flash_attention_2")
    assert "built against another torch" in message and torch.__version__ in message
    assert "undefined symbol" in message
    assert "pip uninstall -y flash-attn" in fix and "sdpa" in fix


def test_a_missing_extension_says_how_to_install(fake_extension):
    fake_extension(None)
    message, fix = flash_import_failure("flash_attention_2")
    assert "is not installed" in message and "make install-gpu" in fix


def test_a_package_without_its_extension_is_not_enough(tmp_path, fake_extension):
    """What find_spec accepted: a `flash_attn` package is present, its compiled part is not."""
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    fake_extension(None)
    assert flash_import_failure("flash_attention_2") is not None
