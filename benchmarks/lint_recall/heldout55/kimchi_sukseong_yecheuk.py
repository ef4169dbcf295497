"""김치냉장고 센서 로그로 김치 숙성 단계(미숙·적숙·과숙)를 예측하는 모델.

냉장고마다 기록 길이가 달라서 ``yuhyo`` (유효 구간 표시)를 collate 에서 함께 만든다.
센서 값: 온도, CO2 농도, 추정 pH, 문 열림 횟수. 설정은 ``SEOLJEONG`` 사전에 모아 둔다.
연구소 내부 실험용 코드 (합성 로그).

Source: conventions.md §1 (HF 2-D attention_mask 행), §5 항목 7; seed self_attention_mask_guide.txt §2
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SEOLJEONG = {
    "seonseo_su": 4,
    "eunnik_chawon": 32,
    "heodeu_su": 4,
    "cheung_su": 2,
    "choedae_gil": 48,
    "danggye_su": 3,
    "hakseupyul": 3e-3,
    "bancheuk": 150,
}


def hapseong_rogeu(rng):
    gil = rng.randint(12, SEOLJEONG["choedae_gil"])
    ondo = rng.uniform(-1.0, 4.0)
    sokdo = 0.02 + 0.01 * ondo
    rogeu = []
    sanmi = 0.0
    for t in range(gil):
        sanmi += sokdo * rng.uniform(0.5, 1.5)
        rogeu.append([ondo + rng.gauss(0, 0.3), 400 + 900 * sanmi, 6.2 - 2.0 * sanmi, float(rng.random() < 0.1)])
    danggye = 0 if sanmi < 0.5 else (1 if sanmi < 1.0 else 2)
    return rogeu, danggye


def rogeu_collate(mukkeum):
    b = len(mukkeum)
    t = max(len(r) for r, _ in mukkeum)
    x = torch.zeros(b, t, SEOLJEONG["seonseo_su"])
    yuhyo = torch.zeros(b, t, dtype=torch.long)
    for i, (rogeu, _) in enumerate(mukkeum):
        x[i, : len(rogeu)] = torch.tensor(rogeu)
        yuhyo[i, : len(rogeu)] = 1
    danggye = torch.tensor([d for _, d in mukkeum])
    return {"x": x, "yuhyo": yuhyo, "danggye": danggye}


class SukseongModel(nn.Module):
    def __init__(self, sj):
        super().__init__()
        d = sj["eunnik_chawon"]
        self.jeongyuhwa = nn.LayerNorm(sj["seonseo_su"])
        self.ipryeok = nn.Linear(sj["seonseo_su"], d)
        self.wichi = nn.Parameter(torch.zeros(1, sj["choedae_gil"], d))
        cheung = nn.TransformerEncoderLayer(d, sj["heodeu_su"], 2 * d, dropout=0.0, batch_first=True)
        self.inkoding = nn.TransformerEncoder(cheung, sj["cheung_su"], enable_nested_tensor=False)
        self.bunryu = nn.Linear(d, sj["danggye_su"])

    def forward(self, x, yuhyo):
        h = self.ipryeok(self.jeongyuhwa(x)) + self.wichi[:, : x.shape[1]]
        garim = (~yuhyo).bool()  # expect: MC518 method
        h = self.inkoding(h, src_key_padding_mask=garim)
        w = yuhyo.unsqueeze(-1).to(h.dtype)
        pyeonggyun = (h * w).sum(1) / w.sum(1)
        return self.bunryu(pyeonggyun)


def hakseup(model, rng):
    opt = torch.optim.Adam(model.parameters(), lr=SEOLJEONG["hakseupyul"])
    for step in range(SEOLJEONG["bancheuk"]):
        model.train()
        mukkeum = rogeu_collate([hapseong_rogeu(rng) for _ in range(16)])
        sonsil = F.cross_entropy(model(mukkeum["x"], mukkeum["yuhyo"]), mukkeum["danggye"])
        opt.zero_grad()
        sonsil.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: 손실 {sonsil.item():.3f}")


@torch.no_grad()
def pyeongga(model, rng, gaesu=200):
    model.eval()
    mukkeum = rogeu_collate([hapseong_rogeu(rng) for _ in range(gaesu)])
    yecheuk = model(mukkeum["x"], mukkeum["yuhyo"]).argmax(-1)
    return (yecheuk == mukkeum["danggye"]).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SukseongModel(SEOLJEONG)
    hakseup(model, random.Random(0))
    print(f"검증 정확도 {pyeongga(model, random.Random(7)):.3f}")
