build/obj/store/tier_ram.o: store/tier_ram.c store/tier_ram.h
store/tier_ram.h:
