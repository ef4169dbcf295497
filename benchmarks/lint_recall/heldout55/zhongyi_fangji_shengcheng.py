"""中医方剂生成：根据四诊症状自回归生成方剂药味序列。

训练样本拼接为「症状 … [分隔] 药味 … [结束]」，症状词与药名共用一个词表。
推理时先整段编码症状前缀，之后逐味生成，各层的键值缓存存放在 ``huancun`` 字典里。
课题组内部实验代码，数据为按证型规则合成的示例方剂。

Source: conventions.md §1, §2.7, §5 第 8 条; pytorch/pytorch PR #111007
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PEIZHI = {
    "cibiao_daxiao": 64,
    "yincang_weidu": 64,
    "toushu": 4,
    "cengshu": 2,
    "zui_chang": 32,
    "xuexilv": 3e-3,
    "xunlian_bushu": 300,
}

TIANCHONG, FENGEFU, JIESHUFU = 0, 1, 2
ZHENGZHUANG = list(range(3, 19))
YAOWEI = list(range(19, 64))
ZHENGXING = {
    (3, 4): [19, 20, 21, 22],
    (5, 6): [23, 24, 25, 26],
    (7, 8): [27, 28, 29, 30],
    (9, 10): [31, 32, 33, 34],
    (11, 12): [35, 36, 37, 38],
    (13, 14): [39, 40, 41, 42],
    (15, 16): [43, 44, 45, 46],
    (17, 18): [47, 48, 49, 50],
}


class ZhuyiliCeng(nn.Module):
    def __init__(self, weidu, toushu):
        super().__init__()
        self.toushu = toushu
        self.qkv = nn.Linear(weidu, 3 * weidu)
        self.shuchu = nn.Linear(weidu, weidu)

    def forward(self, x, huancun=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, n, self.toushu, -1).transpose(1, 2)
        k = k.view(b, n, self.toushu, -1).transpose(1, 2)
        v = v.view(b, n, self.toushu, -1).transpose(1, 2)
        if huancun is not None:
            if "k" in huancun:
                k = torch.cat([huancun["k"], k], dim=2)
                v = torch.cat([huancun["v"], v], dim=2)
            huancun["k"], huancun["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        y = y.transpose(1, 2).reshape(b, n, d)
        return self.shuchu(y)


class FangjiKuai(nn.Module):
    def __init__(self, pz):
        super().__init__()
        d = pz["yincang_weidu"]
        self.ln1 = nn.LayerNorm(d)
        self.zhuyili = ZhuyiliCeng(d, pz["toushu"])
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, huancun=None):
        x = x + self.zhuyili(self.ln1(x), huancun)
        return x + self.mlp(self.ln2(x))


class FangjiShengchengqi(nn.Module):
    def __init__(self, pz):
        super().__init__()
        d = pz["yincang_weidu"]
        self.ci_qianru = nn.Embedding(pz["cibiao_daxiao"], d)
        self.wei_qianru = nn.Embedding(pz["zui_chang"], d)
        self.kuai = nn.ModuleList([FangjiKuai(pz) for _ in range(pz["cengshu"])])
        self.ln = nn.LayerNorm(d)
        self.tou = nn.Linear(d, pz["cibiao_daxiao"], bias=False)

    def forward(self, ids, huancun_lie=None, qishi=0):
        weizhi = torch.arange(qishi, qishi + ids.shape[1], device=ids.device)
        h = self.ci_qianru(ids) + self.wei_qianru(weizhi)
        for i, kuai in enumerate(self.kuai):
            h = kuai(h, None if huancun_lie is None else huancun_lie[i])
        return self.tou(self.ln(h))


def hecheng_yangben(rng):
    zheng = rng.choice(list(ZHENGXING))
    zhengzhuang = list(zheng) + [rng.choice(ZHENGZHUANG)]
    rng.shuffle(zhengzhuang)
    fang = ZHENGXING[zheng] + [50 + (zhengzhuang[0] % 13)]
    return zhengzhuang, fang


def zao_pici(rng, daxiao):
    xulie = []
    for _ in range(daxiao):
        zz, fang = hecheng_yangben(rng)
        xulie.append(zz + [FENGEFU] + fang + [JIESHUFU])
    return torch.tensor(xulie)


def xunlian(moxing, pz, rng):
    youhuaqi = torch.optim.AdamW(moxing.parameters(), lr=pz["xuexilv"])
    moxing.train()
    for bu in range(pz["xunlian_bushu"]):
        pici = zao_pici(rng, 32)
        luoji = moxing(pici[:, :-1])
        biaoqian = pici[:, 1:].clone()
        biaoqian[:, :3] = -100
        sunshi = F.cross_entropy(luoji.reshape(-1, luoji.shape[-1]), biaoqian.reshape(-1))
        youhuaqi.zero_grad()
        sunshi.backward()
        youhuaqi.step()
        if bu % 100 == 0:
            print(f"第 {bu} 步  损失 {sunshi.item():.3f}")


@torch.no_grad()
def shengcheng(moxing, zhengzhuang, zui_duo=8):
    moxing.eval()
    huancun_lie = [dict() for _ in moxing.kuai]
    ids = torch.tensor([zhengzhuang + [FENGEFU]])
    luoji = moxing(ids, huancun_lie, 0)
    qishi = ids.shape[1]
    fang = []
    for _ in range(zui_duo):
        xia = int(luoji[0, -1].argmax())
        if xia == JIESHUFU:
            break
        fang.append(xia)
        luoji = moxing(torch.tensor([[xia]]), huancun_lie, qishi)
        qishi += 1
    return fang


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    moxing = FangjiShengchengqi(PEIZHI)
    xunlian(moxing, PEIZHI, rng)
    zhengque = 0
    ceshi = [hecheng_yangben(random.Random(1000 + i)) for i in range(50)]
    for zz, fang in ceshi:
        zhengque += int(shengcheng(moxing, zz) == fang)
    print(f"方剂完全一致率 {zhengque / len(ceshi):.2f}")
