"""How attention rollout fuses a block's heads: a module of its own, importing no backend,
so that ``keras-vit inspect --help`` lists the choices without Keras."""

HEAD_FUSIONS = ("mean", "max", "min")
