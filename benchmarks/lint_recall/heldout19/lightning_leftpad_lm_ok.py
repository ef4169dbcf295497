"""A Lightning tutorial-style causal LM on left-padded batches, with its own collate class (correct twin).

The Lightning "LightningModule from scratch" layout: a `LeftPadCollator` used as `collate_fn`,
a small decoder whose eager attention adds a 4-D additive bias, `LitCausalLM(L.LightningModule)`
with `save_hyperparameters`, `training_step` / `validation_step` with `self.log`,
`configure_optimizers`, and `L.Trainer(...).fit` under `__main__`. The collator builds the bias
the Hugging Face way, one `finfo(dtype).min` plane for the future and one for the padding, and
adds them: where a key is both future and padding the sum overflows to -inf, so a padded query
row is no longer uniform and attends to later real tokens (and an all-overflow row is NaN).

Twin: combines the two planes with `torch.minimum(causal, padding)`, never below finfo.min.

Source: huggingface/transformers PR #27114 (and PR #26421), NVIDIA-NeMo/Automodel PR #2658;
conventions.md §2.3 (summed finfo.min planes) and §3 items 15-16.
"""
import torch
import torch.nn.functional as F
from torch import nn
import lightning as L


class LeftPadCollator:
    """Left-pads token lists and builds `attn_bias` (B, 1, T, T): 0 = attend, finfo.min = blocked."""

    def __init__(self, pad_id: int = 0, dtype: torch.dtype = torch.float32) -> None:
        self.pad_id = pad_id
        self.dtype = dtype

    def __call__(self, batch: list[list[int]]) -> dict[str, torch.Tensor]:
        T = max(len(x) for x in batch)
        input_ids = torch.full((len(batch), T), self.pad_id, dtype=torch.long)
        for i, x in enumerate(batch):
            input_ids[i, T - len(x):] = torch.tensor(x)
        keep = input_ids != self.pad_id
        neg = torch.finfo(self.dtype).min
        causal = torch.full((T, T), neg, dtype=self.dtype).triu(1)
        padding = torch.zeros(len(batch), 1, 1, T, dtype=self.dtype).masked_fill(~keep[:, None, None, :], neg)
        attn_bias = torch.minimum(causal, padding)
        labels = input_ids.masked_fill(~keep, -100)
        position_ids = (keep.cumsum(-1) - 1).clamp(min=0)
        return {"input_ids": input_ids, "attn_bias": attn_bias, "position_ids": position_ids, "labels": labels}


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (C // self.n_heads) ** -0.5
        att = att + attn_bias.to(att.dtype)
        att = att.softmax(dim=-1)
        x = x + self.out((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class LitCausalLM(L.LightningModule):
    def __init__(self, vocab_size: int = 32, d_model: int = 32, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 64, lr: float = 3e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([DecoderLayer(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids, attn_bias, position_ids):
        x = self.tok(input_ids) + self.pos(position_ids)
        for layer in self.layers:
            x = layer(x, attn_bias)
        return self.lm_head(self.ln_f(x))

    def _loss(self, batch):
        logits = self(batch["input_ids"], batch["attn_bias"], batch["position_ids"])
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    import sys
    torch.manual_seed(0)
    data = [torch.randint(1, 32, (n,)).tolist() for n in (5, 9, 3, 7, 9, 4, 6, 8)]
    collate = LeftPadCollator(pad_id=0)
    batch = collate(data[:2])
    print("-inf cells in attn_bias:", torch.isinf(batch["attn_bias"]).sum().item())
    print("padded query row 0 of the short prompt:", batch["attn_bias"][0, 0, 0].tolist()[:6])
    model = LitCausalLM().eval()
    with torch.no_grad():
        att = torch.zeros(1, 1, 9, 9) + batch["attn_bias"][:1]
        print("row 0 weights:", [round(w, 3) for w in att.softmax(-1)[0, 0, 0].tolist()])
        padded = model(batch["input_ids"], batch["attn_bias"], batch["position_ids"])[0, -5:]
        alone_batch = collate(data[:1])
        alone = model(alone_batch["input_ids"], alone_batch["attn_bias"], alone_batch["position_ids"])[0]
        print("real tokens padded vs alone:", (padded - alone).abs().max().item())
    if "--fit" in sys.argv:
        loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate)
        L.Trainer(max_epochs=2, precision="bf16-mixed", logger=False).fit(model.train(), loader, loader)
