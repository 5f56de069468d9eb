"""The research lab: speed measurements (`speed`, `onnx_speed`, `gpu_benchmark`), the resumable
experiment runner behind RESULTS.md (`experiments`), looking inside trained models (`analysis`,
`gradient_norms`) and the pictures of all three (`plotting`, `plotting_analysis`; matplotlib, the
`plot` extra)."""
