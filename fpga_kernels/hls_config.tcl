# HLS configuration for the nearprep kernel (v++ --hls.pre_tcl). Unverified:
# no Vitis in this workplace. Vitis HLS 2021.2 command names.
#
# Bit-exactness with the CPU path needs IEEE single-precision operators with
# no fused multiply-add: keep unsafe math off (no fmul+fadd -> fmadd
# contraction) and bind float add/multiply to separate full-DSP operators.
config_compile -unsafe_math_optimizations=false
config_op fadd -impl fulldsp -precision standard
config_op fmul -impl maxdsp -precision standard
# m_axi: 512-bit data ports, 64-byte aligned bursts of up to 64 beats.
config_interface -m_axi_max_widen_bitwidth 512 -m_axi_alignment_byte_size 64 \
  -m_axi_latency 64 -m_axi_max_read_burst_length 64 -m_axi_max_write_burst_length 64
# A DATAFLOW region that HLS cannot build as one (a bypass, a multi-reader
# stream) is an error, not a silent sequential fallback.
config_dataflow -strict_mode error
