"""The papers' label-smoothed cross-entropy fused with the output projection, for training.

At the papers' 35,603-word vocabulary the logits are a training step's largest tensors (290 MB for
2,048 target tokens in float32), and `F.cross_entropy(lm_head(h), labels, label_smoothing=e)` walks
over them about fifteen times, forward and backward: 10-14% of a base training step on a CPU, none
of it matmul. Here the gradient of the logits is computed in the forward pass, in place, chunk by
chunk of rows (the loss is a scalar, so backward only scales it):

    loss  = mean over target tokens of  logsumexp(z) - (1 - e) z[target] - (e / V) sum(z)
    dL/dz = (softmax(z) - (1 - e) onehot(target) - e / V) / tokens                     (0 for ignored rows)

and the two gradient matmuls run once over the whole buffer: one (tokens, V) buffer instead of five,
the same matmuls, the plain path's results to float rounding (tests/test_loss.py), bfloat16 autocast
as there.
"""  # noqa: E501

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
# the softmax runs over chunks of about 8M logits (32 MB in float32)
ROWS_PER_CHUNK_ELEMENTS = 1 << 23


class LinearLabelSmoothedCrossEntropy(torch.autograd.Function):
    """loss(hidden (N, d), weight (V, d), targets (N,)) with the gradients computed in forward
    (module docstring)."""

    @staticmethod
    def forward(
        ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, smoothing: float
    ):
        vocab, device = weight.shape[0], hidden.device.type
        compute_dtype = (
            torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
        )
        kept = targets != IGNORE_INDEX  # (N,)
        tokens = kept.sum().clamp(min=1)
        # (N, V)
        gradient = torch.empty(hidden.shape[0], vocab, dtype=compute_dtype, device=hidden.device)
        losses = torch.zeros(hidden.shape[0], dtype=torch.float32, device=hidden.device)  # (N,)
        rows = max(1, ROWS_PER_CHUNK_ELEMENTS // vocab)
        for start in range(0, hidden.shape[0], rows):
            block = slice(start, start + rows)
            # the logits land in the buffer and become their gradient in place
            if compute_dtype == torch.float32:
                # (rows, V)
                z = torch.mm(hidden[block].float(), weight.float().t(), out=gradient[block])
            else:
                z = F.linear(hidden[block], weight).float()  # low-precision matmul, float32 softmax
            target = targets[block].clamp(min=0).unsqueeze(1)  # (rows, 1)
            log_normaliser = torch.logsumexp(z, dim=1, keepdim=True)  # (rows, 1)
            smoothed = (1 - smoothing) * z.gather(1, target) + smoothing / vocab * z.sum(
                1, keepdim=True
            )
            losses[block] = (log_normaliser - smoothed).squeeze(1) * kept[block]
            z.sub_(log_normaliser).exp_().sub_(smoothing / vocab)  # softmax(z) - e / V
            z.scatter_add_(
                1, target, torch.full(target.shape, smoothing - 1, dtype=z.dtype, device=z.device)
            )
            z.mul_(kept[block].unsqueeze(1) / tokens)
            if compute_dtype != torch.float32:
                gradient[block] = z
        ctx.save_for_backward(hidden, weight, gradient)
        return losses.sum() / tokens

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        hidden, weight, gradient = ctx.saved_tensors
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            # (N, d)
            grad_hidden = (gradient @ weight.to(gradient.dtype)).to(hidden.dtype) * grad_output
        if ctx.needs_input_grad[1]:
            # (V, d)
            grad_weight = (gradient.t() @ hidden.to(gradient.dtype)).to(weight.dtype) * grad_output
        return grad_hidden, grad_weight, None, None


def linear_label_smoothed_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, smoothing: float
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy of `F.linear(hidden, weight)` against `labels`
    (IGNORE_INDEX ignored):
    `F.cross_entropy(F.linear(hidden, weight), labels, label_smoothing=smoothing)` without
    its logits."""
    return LinearLabelSmoothedCrossEntropy.apply(
        hidden.flatten(0, -2), weight, labels.flatten(), smoothing
    )


__all__ = ["IGNORE_INDEX", "LinearLabelSmoothedCrossEntropy", "linear_label_smoothed_cross_entropy"]
