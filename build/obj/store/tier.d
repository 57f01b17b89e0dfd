build/obj/store/tier.o: store/tier.c store/idx.h store/tier.h \
 store/tier_ram.h
store/idx.h:
store/tier.h:
store/tier_ram.h:
