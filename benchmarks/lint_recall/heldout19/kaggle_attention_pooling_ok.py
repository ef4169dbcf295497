"""A Kaggle "DeBERTa-v3 baseline [train]"-style kernel with an attention pooling head (correct twin).

The usual Kaggle layout: a `CFG` class, a `collate` that trims each batch to its longest real
sequence, `MeanPooling` and `AttentionPooling` heads, `CustomModel` on `AutoModel` with
`feature()` / `forward()`, an MCRMSE criterion and `train_fn`. The kernel's pooling writes the
padding weights with `w[attention_mask == 0] = float('-inf')`; the forked version rewrites it as
`masked_fill` and hands it the tokenizer's `attention_mask` itself (1 = real token) as the
condition: every real token is filled, only the padding keeps its score, and an essay with no
padding gets uniform weights.

Twin: fills where the mask is 0, `attention_mask.unsqueeze(-1) == 0`.

Source: seed self_attention_mask_guide.txt Q1 (mask values the wrong way round); conventions.md
§1 direction cheat-sheet (HF attention_mask 1 = keep); lucidrains/x-transformers#240 and #172
(conventions.md §4.1, what True means in a mask).
"""
import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModel, BertConfig


class CFG:
    model = "microsoft/deberta-v3-base"
    max_len = 512
    batch_size = 8
    lr = 2e-5
    target_cols = ['cohesion', 'syntax', 'vocabulary', 'phraseology', 'grammar', 'conventions']


def collate(inputs):
    mask_len = int(inputs["attention_mask"].sum(axis=1).max())
    for k, v in inputs.items():
        inputs[k] = inputs[k][:, :mask_len]
    return inputs


class MeanPooling(nn.Module):
    def __init__(self):
        super(MeanPooling, self).__init__()

    def forward(self, last_hidden_state, attention_mask):
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(last_hidden_state.size()).float()
        sum_embeddings = torch.sum(last_hidden_state * input_mask_expanded, 1)
        sum_mask = input_mask_expanded.sum(1)
        sum_mask = torch.clamp(sum_mask, min=1e-9)
        return sum_embeddings / sum_mask


class AttentionPooling(nn.Module):
    def __init__(self, in_dim):
        super().__init__()
        self.attention = nn.Sequential(
            nn.Linear(in_dim, in_dim), nn.LayerNorm(in_dim), nn.GELU(), nn.Linear(in_dim, 1))

    def forward(self, last_hidden_state, attention_mask):
        w = self.attention(last_hidden_state).float()
        w = w.masked_fill(attention_mask.unsqueeze(-1) == 0, -10000.0)
        w = torch.softmax(w, 1)
        return torch.sum(w * last_hidden_state, dim=1)


class CustomModel(nn.Module):
    def __init__(self, cfg, config=None, pretrained=False):
        super().__init__()
        self.cfg = cfg
        self.config = config if config is not None else AutoConfig.from_pretrained(cfg.model)
        self.config.hidden_dropout = self.config.attention_dropout = 0.
        if pretrained:
            self.model = AutoModel.from_pretrained(cfg.model, config=self.config)
        else:
            self.model = AutoModel.from_config(self.config)
        self.mean_pool = MeanPooling()
        self.attn_pool = AttentionPooling(self.config.hidden_size)
        self.fc = nn.Linear(2 * self.config.hidden_size, len(self.cfg.target_cols))

    def feature(self, inputs):
        outputs = self.model(**inputs)
        last_hidden_states = outputs[0]
        return torch.cat([self.mean_pool(last_hidden_states, inputs['attention_mask']),
                          self.attn_pool(last_hidden_states, inputs['attention_mask'])], dim=-1)

    def forward(self, inputs):
        return self.fc(self.feature(inputs))


class MCRMSELoss(nn.Module):
    def forward(self, y_pred, y_true):
        return torch.sqrt(((y_pred - y_true) ** 2).mean(dim=0) + 1e-8).mean()


def train_fn(train_loader, model, criterion, optimizer):
    model.train()
    for step, (inputs, labels) in enumerate(train_loader):
        inputs = collate(inputs)
        loss = criterion(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1000)
        optimizer.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(42)
    # offline: a small randomly initialised encoder stands in for the pretrained DeBERTa
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    model = CustomModel(CFG, config=config)
    input_ids = torch.randint(5, 100, (4, 12))
    attention_mask = torch.ones(4, 12, dtype=torch.long)
    attention_mask[1, 7:] = attention_mask[2, 4:] = attention_mask[3, 9:] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    labels = torch.rand(4, len(CFG.target_cols)) * 4 + 1
    batch = [({"input_ids": input_ids, "attention_mask": attention_mask}, labels)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    print("loss:", train_fn(batch, model, MCRMSELoss(), optimizer))
    model.eval()
    with torch.no_grad():
        padded = model({"input_ids": input_ids[2:3], "attention_mask": attention_mask[2:3]})
        alone = model({"input_ids": input_ids[2:3, :4], "attention_mask": attention_mask[2:3, :4]})
    print("short essay padded vs alone:", (padded - alone).abs().max().item())
