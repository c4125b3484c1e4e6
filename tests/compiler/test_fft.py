"""FFTs lowered as DFT matmuls (lower_fft.py), run on the CPU through the g++ emulation and
compared with torch.fft at fp32 tolerance, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def _check(p, atol):
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("matmul", 0) >= 1      # the DFT runs as a matmul
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r
    assert r["max_abs_err"] < atol, r


def test_padded_rfft_normalised_real_and_imaginary(tmp_path):
    _check(make_problem(tmp_path, "rf", {"B": {"type": "var"}, "C": {"type": "const", "value": 3},
                                         "L": {"type": "var"},
                                         "F": {"type": "expr", "expression": "L + 1"}},
                        {"x": T("B", "C", "L")}, {"re": T("B", "C", "F"), "im": T("B", "C", "F")},
                        """
                        import torch
                        def run(x):
                            n = 2 * x.shape[-1]
                            f = torch.fft.rfft(x.to(torch.float32), n=n) / n
                            return f.real.contiguous(), f.imag.contiguous()
                        """, [{"B": 2, "L": 13}, {"B": 3, "L": 16}]), atol=1e-5)


def test_fft_convolution_irfft_forward_norm(tmp_path):
    """rfft of a signal and a filter, a complex product, irfft (norm='forward'), a slice."""
    _check(make_problem(tmp_path, "fc", {"B": {"type": "var"}, "D": {"type": "const", "value": 4},
                                         "L": {"type": "var"}},
                        {"u": T("B", "D", "L"), "k": T("D", "L")}, {"y": T("B", "D", "L")},
                        """
                        import torch
                        def run(u, k):
                            L = u.shape[-1]
                            n = 2 * L
                            kf = torch.fft.rfft(k, n=n) / n
                            uf = torch.fft.rfft(u, n=n)
                            y = torch.fft.irfft(uf * kf.unsqueeze(0), n=n, norm='forward')[..., :L]
                            return y + u
                        """, [{"B": 2, "L": 11}, {"B": 1, "L": 20}]), atol=1e-4)


def test_complex_fft_ifft_abs_and_ortho_rfft2(tmp_path):
    """fft of a real input (two-sided), complex exp of a phase, ifft back, |.|, an rfft over two
    dims with norm='ortho' and a middle dim transformed."""
    _check(make_problem(tmp_path, "cf", {"B": {"type": "var"}, "H": {"type": "const", "value": 6},
                                         "W": {"type": "const", "value": 8},
                                         "W2": {"type": "const", "value": 5}},
                        {"x": T("B", "H", "W"), "p": T("W")},
                        {"a": T("B", "H", "W"), "r": T("B", "H", "W2"), "m": T("B", "H", "W")},
                        """
                        import torch
                        def run(x, p):
                            f = torch.fft.fft(x) * torch.exp(1j * p)
                            a = (torch.fft.ifft(f) * (0.5 - 2j) / (1 + 1j)).abs()
                            r = torch.fft.rfft2(x, norm='ortho')
                            m = torch.fft.fft(x, dim=1).real
                            return a, r.real + r.imag, m
                        """, [{"B": 2}, {"B": 3}]), atol=1e-5)


def test_rotary_embedding_through_complex_numbers(tmp_path):
    """LLaMA-style rotary embedding: view_as_complex of (pairs), polar frequencies, a complex
    product, view_as_real and a flatten back (no FFT: complex values on their own)."""
    out = make_problem(tmp_path, "rope", {"S": {"type": "var"}, "H": {"type": "const", "value": 2},
                                          "D": {"type": "const", "value": 8},
                                          "D2": {"type": "const", "value": 4}},
                       {"x": {"shape": ["S", "H", "D"], "dtype": "bfloat16"}, "freqs": T("S", "D2")},
                       {"y": {"shape": ["S", "H", "D"], "dtype": "bfloat16"}},
                       """
                       import torch
                       def run(x, freqs):
                           cis = torch.polar(torch.ones_like(freqs), freqs)
                           xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
                           y = torch.view_as_real(xc * cis.unsqueeze(1)).flatten(2)
                           return y.type_as(x)
                       """, [{"S": 5}, {"S": 9}])
    res = compile_problem(out)
    assert res.ok, res.reason
    r = check_problem(out, cap=16, candidate=res.candidate)
    assert r["ok"], r
