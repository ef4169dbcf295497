"""SAINT for telecom customer churn: column attention plus inter-sample attention.

Telco-churn-like rows: contract, payment method and internet service as
categories (-1 when the CRM field is empty), tenure, monthly and total charges
as numbers (total charges are blank for customers in their first month). As in
SAINT, missing entries get a learned mask embedding (`cat_mask` / `con_mask`,
1 = observed) and the CLS token is the first categorical column; the last
batch of an epoch is padded to the batch size for the row attention.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6);
huggingface/transformers#32195 (conventions.md section 3 item 25); conventions.md section 5 item 7.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORIES = (3, 4, 3)
NUM_CONTINUOUS = 3
BATCH_SIZE = 8


class simple_MLP(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(dims[0], dims[1]), nn.ReLU(), nn.Linear(dims[1], dims[2]))

    def forward(self, x):
        if len(x.shape) == 1:
            x = x.view(x.size(0), -1)
        return self.layers(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=8, dropout=0.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.dropout = dropout

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.view(b, n, self.heads, -1).transpose(1, 2), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return x + self.fn(self.norm(x), **kwargs)


def feed_forward(dim, mult=2, dropout=0.1):
    return nn.Sequential(nn.Linear(dim, dim * mult), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim * mult, dim))


class RowColTransformer(nn.Module):
    def __init__(self, dim, nfeats, depth=2, heads=4, dim_head=8):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                PreNormResidual(dim, Attention(dim, heads, dim_head)),
                PreNormResidual(dim, feed_forward(dim)),
                PreNormResidual(dim * nfeats, Attention(dim * nfeats, heads, 64)),
                PreNormResidual(dim * nfeats, feed_forward(dim * nfeats)),
            ]))

    def forward(self, x, feature_keep, row_keep):
        _, n, d = x.shape
        row_mask = row_keep[None, None, None, :]
        for attn1, ff1, attn2, ff2 in self.layers:
            x = attn1(x, mask=feature_keep[:, None, None, :].to(x.dtype))  # expect: MC508 cast
            x = ff1(x)
            x = x.reshape(1, -1, n * d)
            x = ff2(attn2(x, mask=row_mask))
            x = x.reshape(-1, n, d)
        return x


class SAINT(nn.Module):
    def __init__(self, categories=CATEGORIES, num_continuous=NUM_CONTINUOUS, dim=16):
        super().__init__()
        categories = (1,) + tuple(categories)
        self.register_buffer("categories_offset", torch.tensor([0] + list(np.cumsum(categories)[:-1])))
        self.embeds = nn.Embedding(sum(categories), dim)
        self.simple_MLP = nn.ModuleList([simple_MLP([1, 32, dim]) for _ in range(num_continuous)])
        self.mask_embeds_cat = nn.Embedding(len(categories), dim)
        self.mask_embeds_cont = nn.Embedding(num_continuous, dim)
        self.transformer = RowColTransformer(dim, len(categories) + num_continuous)
        self.mlpfory = simple_MLP([dim, 32, 1])

    def embed_data_mask(self, x_categ, x_cont, cat_mask, con_mask):
        x_categ_enc = self.embeds(x_categ + self.categories_offset)
        x_cont_enc = torch.stack([mlp(x_cont[:, i]) for i, mlp in enumerate(self.simple_MLP)], dim=1)
        cat_slots = torch.arange(x_categ.shape[1], device=x_categ.device)
        con_slots = torch.arange(x_cont.shape[1], device=x_cont.device)
        x_categ_enc = torch.where(cat_mask[..., None] == 1, x_categ_enc, self.mask_embeds_cat(cat_slots))
        x_cont_enc = torch.where(con_mask[..., None] == 1, x_cont_enc, self.mask_embeds_cont(con_slots))
        return torch.cat([x_categ_enc, x_cont_enc], dim=1)

    def forward(self, batch):
        x = self.embed_data_mask(batch["x_categ"], batch["x_cont"], batch["cat_mask"], batch["con_mask"])
        feature_keep = torch.cat([batch["cat_mask"], batch["con_mask"]], dim=1)
        reps = self.transformer(x, feature_keep, batch["row_keep"])
        return self.mlpfory(reps[:, 0, :]).squeeze(-1)


def collate_rows(categ, cont, churn, batch_size=BATCH_SIZE):
    n = categ.shape[0]
    pad = batch_size - n
    cat_mask = (categ >= 0).long()
    con_mask = (~torch.isnan(cont)).long()
    x_categ = torch.cat([torch.zeros(n, 1, dtype=torch.long), categ.clamp(min=0)], dim=1)
    cat_mask = torch.cat([torch.ones(n, 1, dtype=torch.long), cat_mask], dim=1)
    batch = {
        "x_categ": F.pad(x_categ, (0, 0, 0, pad)),
        "x_cont": F.pad(torch.nan_to_num(cont), (0, 0, 0, pad)),
        "cat_mask": F.pad(cat_mask, (0, 0, 0, pad), value=1),
        "con_mask": F.pad(con_mask, (0, 0, 0, pad), value=1),
        "y": F.pad(churn, (0, pad)),
        "row_keep": torch.arange(batch_size) < n,
    }
    return batch


def synthetic_customers(n):
    categ = torch.stack([torch.randint(0, c, (n,)) for c in CATEGORIES], dim=1)
    categ[torch.rand(n, len(CATEGORIES)) < 0.15] = -1
    tenure = torch.randint(0, 72, (n,)).float()
    monthly = 20 + 80 * torch.rand(n)
    total = torch.where(tenure > 0, tenure * monthly, torch.full_like(monthly, float("nan")))
    cont = torch.stack([tenure / 72, monthly / 100, total / 7200], dim=1)
    churn = ((categ[:, 0] == 0).float() * 0.5 + (tenure < 12).float() * 0.4 + 0.1 * torch.rand(n) > 0.5).float()
    return categ, cont, churn


if __name__ == "__main__":
    torch.manual_seed(0)
    categ, cont, churn = synthetic_customers(14)
    batches = [collate_rows(categ[i : i + BATCH_SIZE], cont[i : i + BATCH_SIZE], churn[i : i + BATCH_SIZE])
               for i in range(0, 14, BATCH_SIZE)]
    model = SAINT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for batch in batches:
            logits = model(batch)
            keep = batch["row_keep"]
            loss = F.binary_cross_entropy_with_logits(logits[keep], batch["y"][keep])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(batches[-1]))[batches[-1]["row_keep"]]
    print("loss %.4f" % loss.item(), "churn probs", [round(p, 3) for p in probs.tolist()])
