"""Runtime pieces of particular layer kinds under SP: Gated DeltaNet (linear attention) and mixture-of-experts
routing and its auxiliary loss. What each model family needs is declared in longctx/config/families/."""
