# HLS configuration for the nearprep kernel (v++ --hls.pre_tcl). Unverified:
# no Vitis in this workplace. Only options UG1399 2021.2 documents, in the
# form it documents them (boolean options are bare flags; no `=false`).
#
# Bit-exactness with the CPU path needs IEEE single-precision operators with
# no fused multiply-add. Unsafe math optimisations are off by default in
# 2021.2 (config_compile -unsafe_math_optimizations is a flag that turns them
# ON), so it is not given; float add/multiply are bound to separate
# full-DSP operators (config_op: -impl and -latency only; `-precision` is a
# later release's option and is not used). The C sources are compiled with
# -ffp-contract=off (Makefile HLS_CFLAGS), checked in the IR by CI.
config_op fadd -impl fulldsp
config_op fmul -impl maxdsp
# m_axi: 512-bit data ports, 64-byte aligned bursts of up to 64 beats.
config_interface -m_axi_max_widen_bitwidth 512 -m_axi_alignment_byte_size 64 \
  -m_axi_latency 64 -m_axi_max_read_burst_length 64 -m_axi_max_write_burst_length 64
# A DATAFLOW region HLS cannot build as one is reported, not silently made
# sequential. `warning` first: `error` also stops on bypass warnings the
# first csynth run has not yet shown to be harmless (fpga_kernels/
# first_vitis_hour.sh runs with warning and greps the messages); switch to
# `error` once that run is clean.
config_dataflow -strict_mode warning
