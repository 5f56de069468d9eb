"""nmt_toolkit: everything around the models of `modeling_dwlstm` that a translation project needs.

- data: `data` (parallel corpora from local folders, JSON lines or the Hub; joint BPE), `batching`
  (token-count batches), `multilingual` (many directions in one model: tags, temperature sampling);
- training: `training` (`Seq2SeqTrainer` by the papers' recipe, resumable), `checkpoints` (saving,
  loading, averaging), `files` (atomic writes, checksums);
- evaluation: `evaluation` (beam search, BLEU, chrF, paired bootstrap, many directions, off-target
  rates), `metrics` and `metric_translation` (the same scores as `evaluate` modules and Trainer
  metrics);
- sharing and deployment: `hub` (model cards, push), `ctranslate2_export`;
- `quickstart`, `cli` (what the scripts share);
- `lab`: the research side (speed measurements, the experiment runner, analysis of trained
  models, plots).

The scripts in the repository's `scripts/` folder are thin wrappers around these functions.
"""

# first: the family registered, transformers' model code imported quietly
import modeling_dwlstm  # noqa: F401
