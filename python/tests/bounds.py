"""The error bounds of the quant package, for the tests that check sums
against exact ones."""


def error_bound(n, e, bits, out_rel=2**-24, out_abs=0.0):
    """quant.ErrorBound16 (bits 16) or quant.ErrorBound (bits 32, n <= 128):
    the most an element of an n-way sum may differ from the exact sum when
    every input is below 2^e. out_rel and out_abs are the output's rounding:
    float32's by default; float16's (2^-24 + 2^-11, 2^-25) and bfloat16's
    (2^-24 + 2^-8, 2^-134) give the F16 and BF16 forms."""
    if bits == 16:
        full = 2**15 - 1
        quant = n * max(0.5, full / n - full // n) / full
    else:
        quant = n / (2 * (2**31 - 1))
    return n * 2.0**e * (quant + out_rel + 2**-50) + out_abs
