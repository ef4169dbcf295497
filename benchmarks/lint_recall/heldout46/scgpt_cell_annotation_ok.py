"""Cell-type annotation of single-cell RNA-seq profiles, after scGPT.

Imitates bowang-lab/scGPT (`scgpt/model/model.py` and the `Tutorial_Annotation` fine-tuning
script): `GeneVocab` with `<pad>` / `<cls>` / `<eoc>`, `tokenize_and_pad_batch` keeping only
the expressed genes of each cell (`include_zero_gene=False`) and prepending `<cls>`,
`random_mask_value` for the masked expression objective, `TransformerModel` with `GeneEncoder`,
`ContinuousValueEncoder`, a batch-first `nn.TransformerEncoder`, `ExprDecoder`, `ClsDecoder`
over the `<cls>` cell embedding, `_encode` / `forward(src, values, src_key_padding_mask,
CLS=..., MVC=...)`, and the tutorial's `prepare_data` / `train` / `evaluate` with
`masked_mse_loss` plus the cell-type cross-entropy; here the tokenizer also returns an
`attention_mask`. The cells are synthetic Poisson counts over 64 highly variable genes with
marker genes for four cell types.

Source: conventions.md section 1 (HF transformers 2-D attention_mask row, direction
cheat-sheet) and section 5 item 7.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

pad_token = "<pad>"
pad_value = -2
mask_value = -1
special_tokens = [pad_token, "<cls>", "<eoc>"]


class GeneVocab(dict):
    def __init__(self, genes):
        super().__init__()
        for tok in special_tokens + list(genes):
            self[tok] = len(self)


def tokenize_and_pad_batch(data, gene_ids, max_len, vocab, pad_token, pad_value, append_cls=True,
                           include_zero_gene=False, cls_token="<cls>"):
    genes_list, values_list, mask_list = [], [], []
    for row in data:
        idx = np.arange(len(row)) if include_zero_gene else np.nonzero(row)[0]
        genes, values = gene_ids[idx], row[idx]
        if append_cls:
            genes = np.insert(genes, 0, vocab[cls_token])
            values = np.insert(values, 0, 0.0)
        genes, values = genes[:max_len], values[:max_len]
        n = len(genes)
        genes_list.append(np.pad(genes, (0, max_len - n), constant_values=vocab[pad_token]))
        values_list.append(np.pad(values, (0, max_len - n), constant_values=pad_value))
        mask_list.append(np.pad(np.ones(n, dtype=np.int64), (0, max_len - n)))
    return {
        "genes": torch.tensor(np.stack(genes_list), dtype=torch.long),
        "values": torch.tensor(np.stack(values_list), dtype=torch.float32),
        "attention_mask": torch.tensor(np.stack(mask_list), dtype=torch.long),
    }


def random_mask_value(values, mask_ratio=0.15, mask_value=-1, pad_value=-2, generator=None):
    values = values.clone()
    maskable = (values != pad_value) & (values != 0)
    maskable[:, 0] = False
    draw = torch.rand(values.shape, generator=generator) < mask_ratio
    values[maskable & draw] = mask_value
    return values


class GeneEncoder(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.enc_norm = nn.LayerNorm(embedding_dim)

    def forward(self, x):
        return self.enc_norm(self.embedding(x))


class ContinuousValueEncoder(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_value=512):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.linear1 = nn.Linear(1, d_model)
        self.activation = nn.ReLU()
        self.linear2 = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.max_value = max_value

    def forward(self, x):
        x = x.unsqueeze(-1)
        x = torch.clamp(x, max=self.max_value)
        x = self.activation(self.linear1(x))
        x = self.linear2(x)
        return self.dropout(self.norm(x))


class ExprDecoder(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(d_model, d_model), nn.LeakyReLU(), nn.Linear(d_model, d_model),
                                nn.LeakyReLU(), nn.Linear(d_model, 1))

    def forward(self, x):
        return dict(pred=self.fc(x).squeeze(-1))


class ClsDecoder(nn.Module):
    def __init__(self, d_model, n_cls, nlayers=3):
        super().__init__()
        self._decoder = nn.ModuleList()
        for _ in range(nlayers - 1):
            self._decoder.append(nn.Linear(d_model, d_model))
            self._decoder.append(nn.ReLU())
            self._decoder.append(nn.LayerNorm(d_model))
        self.out_layer = nn.Linear(d_model, n_cls)

    def forward(self, x):
        for layer in self._decoder:
            x = layer(x)
        return self.out_layer(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, nlayers_cls=3, n_cls=1, vocab=None, dropout=0.2,
                 pad_token="<pad>", cell_emb_style="cls"):
        super().__init__()
        self.d_model = d_model
        self.cell_emb_style = cell_emb_style
        self.encoder = GeneEncoder(ntoken, d_model, padding_idx=vocab[pad_token])
        self.value_encoder = ContinuousValueEncoder(d_model, dropout)
        encoder_layers = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.decoder = ExprDecoder(d_model)
        self.cls_decoder = ClsDecoder(d_model, n_cls, nlayers=nlayers_cls)

    def _encode(self, src, values, src_key_padding_mask):
        src = self.encoder(src)
        self.cur_gene_token_embs = src
        values = self.value_encoder(values)
        total_embs = src + values
        if src_key_padding_mask.dtype != torch.bool:
            src_key_padding_mask = src_key_padding_mask.bool()
        return self.transformer_encoder(total_embs, src_key_padding_mask=src_key_padding_mask)

    def _get_cell_emb_from_layer(self, layer_output):
        if self.cell_emb_style == "cls":
            return layer_output[:, 0, :]
        return torch.mean(layer_output, dim=1)

    def forward(self, src, values, src_key_padding_mask, CLS=False, MVC=False):
        transformer_output = self._encode(src, values, src_key_padding_mask)
        output = {}
        output["mlm_output"] = self.decoder(transformer_output)["pred"]
        cell_emb = self._get_cell_emb_from_layer(transformer_output)
        output["cell_emb"] = cell_emb
        if CLS:
            output["cls_output"] = self.cls_decoder(cell_emb)
        return output


def masked_mse_loss(input, target, mask):
    mask = mask.float()
    loss = F.mse_loss(input * mask, target * mask, reduction="sum")
    return loss / mask.sum().clamp(min=1.0)


def simulate_cells(n_cells, n_genes, n_types, rng):
    base = rng.gamma(0.3, 1.0, n_genes)
    markers = rng.choice(n_genes, (n_types, 6), replace=False)
    labels = rng.integers(0, n_types, n_cells)
    counts = np.zeros((n_cells, n_genes), dtype=np.float32)
    for i, t in enumerate(labels):
        rate = base.copy()
        rate[markers[t]] += 4.0
        counts[i] = rng.poisson(rate * rng.uniform(0.6, 1.4))
    return np.log1p(counts), labels


def prepare_data(tokenized, celltype_labels, generator):
    masked_values = random_mask_value(tokenized["values"], mask_ratio=0.15, mask_value=mask_value,
                                      pad_value=pad_value, generator=generator)
    return {
        "gene_ids": tokenized["genes"],
        "values": masked_values,
        "target_values": tokenized["values"],
        "attention_mask": tokenized["attention_mask"],
        "celltype_labels": torch.tensor(celltype_labels, dtype=torch.long),
    }


def iterate(data_pt, batch_size, shuffle, generator=None):
    n = len(data_pt["gene_ids"])
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield {k: v[idx] for k, v in data_pt.items()}


def train(model, data_pt, optimizer, criterion_cls, generator, batch_size=32):
    model.train()
    total_loss = 0.0
    for batch_data in iterate(data_pt, batch_size, True, generator):
        input_gene_ids = batch_data["gene_ids"]
        input_values = batch_data["values"]
        target_values = batch_data["target_values"]
        celltype_labels = batch_data["celltype_labels"]
        src_key_padding_mask = batch_data["attention_mask"] == 0
        output_dict = model(input_gene_ids, input_values, src_key_padding_mask=src_key_padding_mask, CLS=True)
        masked_positions = input_values.eq(mask_value)
        loss_mse = masked_mse_loss(output_dict["mlm_output"], target_values, masked_positions)
        loss_cls = criterion_cls(output_dict["cls_output"], celltype_labels)
        loss = loss_mse + loss_cls
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        total_loss += loss.item()
    return total_loss


def evaluate(model, data_pt, n_types):
    model.eval()
    predictions = []
    with torch.no_grad():
        for batch_data in iterate(data_pt, 64, False):
            src_key_padding_mask = batch_data["gene_ids"].eq(vocab[pad_token])
            output_dict = model(batch_data["gene_ids"], batch_data["target_values"],
                                src_key_padding_mask=src_key_padding_mask, CLS=True)
            predictions.append(output_dict["cls_output"].argmax(1))
    predictions = torch.cat(predictions).numpy()
    labels = data_pt["celltype_labels"].numpy()
    f1s = []
    for t in range(n_types):
        tp = np.sum((predictions == t) & (labels == t))
        precision = tp / max(np.sum(predictions == t), 1)
        recall = tp / max(np.sum(labels == t), 1)
        f1s.append(2 * precision * recall / max(precision + recall, 1e-8))
    return float(np.mean(predictions == labels)), float(np.mean(f1s))


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n_genes, n_types, max_seq_len = 64, 4, 48
    genes = [f"GENE{i}" for i in range(n_genes)]
    vocab = GeneVocab(genes)
    gene_ids = np.array([vocab[g] for g in genes])
    generator = torch.Generator().manual_seed(0)
    cells_x, cells_y = simulate_cells(448, n_genes, n_types, rng)
    train_x, train_y, test_x, test_y = cells_x[:320], cells_y[:320], cells_x[320:], cells_y[320:]
    train_pt = prepare_data(tokenize_and_pad_batch(train_x, gene_ids, max_seq_len, vocab, pad_token, pad_value),
                            train_y, generator)
    test_pt = prepare_data(tokenize_and_pad_batch(test_x, gene_ids, max_seq_len, vocab, pad_token, pad_value),
                           test_y, generator)
    model = TransformerModel(len(vocab), 48, 4, 96, 2, n_cls=n_types, vocab=vocab, dropout=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion_cls = nn.CrossEntropyLoss()
    for epoch in range(1, 5):
        loss = train(model, train_pt, optimizer, criterion_cls, generator)
        acc, macro_f1 = evaluate(model, test_pt, n_types)
        print(f"epoch {epoch}: train loss {loss:.3f}  test accuracy {acc:.3f}  macro F1 {macro_f1:.3f}")
