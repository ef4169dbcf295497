"""Klasifikasi status kehalalan produk (halal, syubhat, perlu audit) dari daftar komposisi
pada label kemasan, untuk membantu pra-pemeriksaan dokumen sertifikasi.

Teks komposisi dipecah per bahan oleh ``PemecahKomposisi`` yang mengembalikan kamus
``input_ids`` / ``attention_mask`` seperti tokenizer Hugging Face.
Enkoder memakai ``nn.TransformerEncoder`` bawaan PyTorch. Konfigurasi ada di kamus ``KONFIG``;
data pada demo dibangkitkan secara sintetis.

Source: conventions.md §1 dan §5 butir 1; seed self_attention_mask_guide.txt §2
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

KONFIG = {
    "ukuran_kosakata": 64,
    "dimensi": 48,
    "jumlah_kepala": 4,
    "jumlah_lapisan": 2,
    "panjang_maks": 20,
    "laju_belajar": 2e-3,
    "langkah": 200,
}
LABEL = ["halal", "syubhat", "perlu_audit"]
BAHAN_UMUM = ["gula", "garam", "air", "tepung_terigu", "minyak_sawit", "susu_bubuk", "kakao", "ragi",
              "telur", "kedelai", "jagung", "vanili", "perisa_alami", "pati", "cuka", "kunyit"]
BAHAN_SYUBHAT = ["gelatin", "emulsifier_e471", "perisa_sintetis", "l_sistein"]
BAHAN_AUDIT = ["angciu", "mirin", "rum_ekstrak", "lemak_babi"]


class PemecahKomposisi:
    def __init__(self):
        semua = ["[PAD]"] + BAHAN_UMUM + BAHAN_SYUBHAT + BAHAN_AUDIT
        self.kamus = {b: i for i, b in enumerate(semua)}

    def __call__(self, daftar_teks):
        ids = [[self.kamus[b.strip()] for b in teks.split(",")][: KONFIG["panjang_maks"]] for teks in daftar_teks]
        n = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (n - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": input_ids != 0}


def buat_contoh(rng):
    bahan = rng.sample(BAHAN_UMUM, rng.randint(2, 10))
    label = rng.choices([0, 1, 2], weights=[0.5, 0.3, 0.2])[0]
    if label == 1:
        bahan.append(rng.choice(BAHAN_SYUBHAT))
    elif label == 2:
        bahan.append(rng.choice(BAHAN_AUDIT))
    rng.shuffle(bahan)
    return ", ".join(bahan), label


class PengklasifikasiHalal(nn.Module):
    def __init__(self, k):
        super().__init__()
        d = k["dimensi"]
        self.penyematan = nn.Embedding(k["ukuran_kosakata"], d, padding_idx=0)
        lapisan = nn.TransformerEncoderLayer(d, k["jumlah_kepala"], 2 * d, dropout=0.1, batch_first=True)
        self.enkoder = nn.TransformerEncoder(lapisan, k["jumlah_lapisan"], enable_nested_tensor=False)
        self.kepala = nn.Linear(d, len(LABEL))

    def forward(self, input_ids, attention_mask):
        topeng = attention_mask
        h = self.penyematan(input_ids)
        h = self.enkoder(h, src_key_padding_mask=~topeng)
        bobot = topeng.unsqueeze(-1).float()
        return self.kepala((h * bobot).sum(1) / bobot.sum(1))


def latih(model, pemecah, rng):
    opt = torch.optim.AdamW(model.parameters(), lr=KONFIG["laju_belajar"])
    for langkah in range(KONFIG["langkah"]):
        model.train()
        contoh = [buat_contoh(rng) for _ in range(32)]
        masukan = pemecah([t for t, _ in contoh])
        kerugian = F.cross_entropy(model(**masukan), torch.tensor([y for _, y in contoh]))
        opt.zero_grad()
        kerugian.backward()
        opt.step()
        if langkah % 50 == 0:
            print(f"langkah {langkah}: kerugian {kerugian.item():.3f}")


@torch.no_grad()
def evaluasi(model, pemecah):
    model.eval()
    contoh = [buat_contoh(random.Random(2024 + i)) for i in range(300)]
    prediksi = model(**pemecah([t for t, _ in contoh])).argmax(-1)
    return (prediksi == torch.tensor([y for _, y in contoh])).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    pemecah = PemecahKomposisi()
    model = PengklasifikasiHalal(KONFIG)
    latih(model, pemecah, random.Random(0))
    print(f"akurasi validasi: {evaluasi(model, pemecah):.3f}")
    print(LABEL[int(model(**pemecah(["gula, gelatin, air"])).argmax())])
