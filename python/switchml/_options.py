"""The options a switchml process group takes from its creator, as torch's
own backends take theirs (ProcessGroupNCCL.Options): handed over as
init_process_group's or new_group's pg_options."""

# The widths switchml.Config.WireBits takes: the type's default, 16, 32.
WIRE_BITS = (0, 16, 32)


def check_wire_bits(value, where):
    """value as a wire width, or ValueError naming where it came from."""
    if isinstance(value, bool) or value not in WIRE_BITS:
        raise ValueError("switchml: %s is %r: want 0 (float16 and bfloat16 at 16 bits, float32 at 32), 16 (every "
                         "float type at 16 bits, float32 too) or 32 (every type at 32 bits)" % (where, value))
    return int(value)


class Options:
    """Settings of one switchml process group, given to torch as pg_options:

        dist.init_process_group("switchml", pg_options=switchml.Options(wire_bits=16))
        dist.new_group(ranks, backend="switchml", pg_options=switchml.Options(wire_bits=16))

    They take precedence over the environment's (SWITCHML_*), for this
    group alone. None leaves a setting to the environment.

    wire_bits: how wide float values travel (switchml.Config.WireBits). 0,
    the default, sends float16 and bfloat16 tensors at 16 bits a value and
    float32 at 32; 16 sends float32 at 16 bits as well, half its bytes, at
    about 12 bits of precision below the largest possible sum of 8 ranks
    (quant.ErrorBound16; what DDP's fp16 and bf16 compression hooks buy,
    without casting the gradients);
    32 sends every type at 32 bits. int32 always travels at 32 bits,
    exactly. Every rank of a group must ask for the same width
    (switchml.JobMismatch otherwise). SWITCHML_WIRE_BITS sets it for every
    group of the process.
    """

    def __init__(self, wire_bits=None):
        self.wire_bits = None if wire_bits is None else check_wire_bits(wire_bits, "Options.wire_bits")

    def settings(self):
        """The library's settings these options set (switchml.Session's
        keyword arguments)."""
        return {} if self.wire_bits is None else {"wire_bits": self.wire_bits}

    def __repr__(self):
        return "switchml.Options(%s)" % ", ".join("%s=%r" % kv for kv in self.settings().items())
