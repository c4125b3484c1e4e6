"""The compiler's disk cache key covers the kernel sources its plans embed, not only its Python."""

from __future__ import annotations

from solforge.compiler import api


def test_a_changed_header_changes_the_code_version(tmp_path):
    py, cuda = tmp_path / "py", tmp_path / "cuda"
    py.mkdir()
    cuda.mkdir()
    (py / "lower.py").write_text("x = 1\n")
    (cuda / "sfg_gemm.cuh").write_text("// acc += a * b\n")
    before = api._code_version((py, cuda))
    (cuda / "sfg_gemm.cuh").write_text("// part = a * b; acc += part\n")
    after = api._code_version((py, cuda))
    assert after != before
    (cuda / "notes.txt").write_text("not a source")      # only sources count
    assert api._code_version((py, cuda)) == after


def test_the_default_version_reads_the_embedded_kernel_sources():
    assert (api.KERNEL_SOURCES / "sfg_gemm.cuh").is_file()
    assert (api.KERNEL_SOURCES / "attention_flash.cu").is_file()
    assert api._code_version() != api._code_version((api.Path(api.__file__).parent,))


def test_the_keys_use_the_installed_version_hashed_once():
    assert api._own_version() == api._code_version()
    assert api._own_version.cache_info().currsize == 1
