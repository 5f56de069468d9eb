"""The research lab: speed benchmarks (`benchmark`), the resumable experiment runner behind RESULTS.md
(`experiments`), looking inside trained models (`analysis`, `gradient_norms`) and the pictures of all three
(`plotting`, `plotting_analysis`; matplotlib, the `plot` extra)."""
