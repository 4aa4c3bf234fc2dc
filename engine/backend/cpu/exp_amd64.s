//go:build !purego

#include "textflag.h"

// expc holds expf's constants (expf.go) as float32 bits, each repeated over 16 lanes (64 bytes;
// the AVX2 code reads the first 32): at offsets 0, 64, 128… log2e, ln2hi, ln2lo, the Taylor
// coefficients 1/5040, 1/720, 1/120, 1/24, 1/6, 1/2, then 1, the cut-offs 88.72283 and
// −87.33654, the sign bit, the exponent bias 127 (an integer) and +Inf.
DATA expc<>+0(SB)/4, $0x3fb8aa3b
DATA expc<>+4(SB)/4, $0x3fb8aa3b
DATA expc<>+8(SB)/4, $0x3fb8aa3b
DATA expc<>+12(SB)/4, $0x3fb8aa3b
DATA expc<>+16(SB)/4, $0x3fb8aa3b
DATA expc<>+20(SB)/4, $0x3fb8aa3b
DATA expc<>+24(SB)/4, $0x3fb8aa3b
DATA expc<>+28(SB)/4, $0x3fb8aa3b
DATA expc<>+32(SB)/4, $0x3fb8aa3b
DATA expc<>+36(SB)/4, $0x3fb8aa3b
DATA expc<>+40(SB)/4, $0x3fb8aa3b
DATA expc<>+44(SB)/4, $0x3fb8aa3b
DATA expc<>+48(SB)/4, $0x3fb8aa3b
DATA expc<>+52(SB)/4, $0x3fb8aa3b
DATA expc<>+56(SB)/4, $0x3fb8aa3b
DATA expc<>+60(SB)/4, $0x3fb8aa3b
DATA expc<>+64(SB)/4, $0x3f318000
DATA expc<>+68(SB)/4, $0x3f318000
DATA expc<>+72(SB)/4, $0x3f318000
DATA expc<>+76(SB)/4, $0x3f318000
DATA expc<>+80(SB)/4, $0x3f318000
DATA expc<>+84(SB)/4, $0x3f318000
DATA expc<>+88(SB)/4, $0x3f318000
DATA expc<>+92(SB)/4, $0x3f318000
DATA expc<>+96(SB)/4, $0x3f318000
DATA expc<>+100(SB)/4, $0x3f318000
DATA expc<>+104(SB)/4, $0x3f318000
DATA expc<>+108(SB)/4, $0x3f318000
DATA expc<>+112(SB)/4, $0x3f318000
DATA expc<>+116(SB)/4, $0x3f318000
DATA expc<>+120(SB)/4, $0x3f318000
DATA expc<>+124(SB)/4, $0x3f318000
DATA expc<>+128(SB)/4, $0xb95e8083
DATA expc<>+132(SB)/4, $0xb95e8083
DATA expc<>+136(SB)/4, $0xb95e8083
DATA expc<>+140(SB)/4, $0xb95e8083
DATA expc<>+144(SB)/4, $0xb95e8083
DATA expc<>+148(SB)/4, $0xb95e8083
DATA expc<>+152(SB)/4, $0xb95e8083
DATA expc<>+156(SB)/4, $0xb95e8083
DATA expc<>+160(SB)/4, $0xb95e8083
DATA expc<>+164(SB)/4, $0xb95e8083
DATA expc<>+168(SB)/4, $0xb95e8083
DATA expc<>+172(SB)/4, $0xb95e8083
DATA expc<>+176(SB)/4, $0xb95e8083
DATA expc<>+180(SB)/4, $0xb95e8083
DATA expc<>+184(SB)/4, $0xb95e8083
DATA expc<>+188(SB)/4, $0xb95e8083
DATA expc<>+192(SB)/4, $0x39500d01
DATA expc<>+196(SB)/4, $0x39500d01
DATA expc<>+200(SB)/4, $0x39500d01
DATA expc<>+204(SB)/4, $0x39500d01
DATA expc<>+208(SB)/4, $0x39500d01
DATA expc<>+212(SB)/4, $0x39500d01
DATA expc<>+216(SB)/4, $0x39500d01
DATA expc<>+220(SB)/4, $0x39500d01
DATA expc<>+224(SB)/4, $0x39500d01
DATA expc<>+228(SB)/4, $0x39500d01
DATA expc<>+232(SB)/4, $0x39500d01
DATA expc<>+236(SB)/4, $0x39500d01
DATA expc<>+240(SB)/4, $0x39500d01
DATA expc<>+244(SB)/4, $0x39500d01
DATA expc<>+248(SB)/4, $0x39500d01
DATA expc<>+252(SB)/4, $0x39500d01
DATA expc<>+256(SB)/4, $0x3ab60b61
DATA expc<>+260(SB)/4, $0x3ab60b61
DATA expc<>+264(SB)/4, $0x3ab60b61
DATA expc<>+268(SB)/4, $0x3ab60b61
DATA expc<>+272(SB)/4, $0x3ab60b61
DATA expc<>+276(SB)/4, $0x3ab60b61
DATA expc<>+280(SB)/4, $0x3ab60b61
DATA expc<>+284(SB)/4, $0x3ab60b61
DATA expc<>+288(SB)/4, $0x3ab60b61
DATA expc<>+292(SB)/4, $0x3ab60b61
DATA expc<>+296(SB)/4, $0x3ab60b61
DATA expc<>+300(SB)/4, $0x3ab60b61
DATA expc<>+304(SB)/4, $0x3ab60b61
DATA expc<>+308(SB)/4, $0x3ab60b61
DATA expc<>+312(SB)/4, $0x3ab60b61
DATA expc<>+316(SB)/4, $0x3ab60b61
DATA expc<>+320(SB)/4, $0x3c088889
DATA expc<>+324(SB)/4, $0x3c088889
DATA expc<>+328(SB)/4, $0x3c088889
DATA expc<>+332(SB)/4, $0x3c088889
DATA expc<>+336(SB)/4, $0x3c088889
DATA expc<>+340(SB)/4, $0x3c088889
DATA expc<>+344(SB)/4, $0x3c088889
DATA expc<>+348(SB)/4, $0x3c088889
DATA expc<>+352(SB)/4, $0x3c088889
DATA expc<>+356(SB)/4, $0x3c088889
DATA expc<>+360(SB)/4, $0x3c088889
DATA expc<>+364(SB)/4, $0x3c088889
DATA expc<>+368(SB)/4, $0x3c088889
DATA expc<>+372(SB)/4, $0x3c088889
DATA expc<>+376(SB)/4, $0x3c088889
DATA expc<>+380(SB)/4, $0x3c088889
DATA expc<>+384(SB)/4, $0x3d2aaaab
DATA expc<>+388(SB)/4, $0x3d2aaaab
DATA expc<>+392(SB)/4, $0x3d2aaaab
DATA expc<>+396(SB)/4, $0x3d2aaaab
DATA expc<>+400(SB)/4, $0x3d2aaaab
DATA expc<>+404(SB)/4, $0x3d2aaaab
DATA expc<>+408(SB)/4, $0x3d2aaaab
DATA expc<>+412(SB)/4, $0x3d2aaaab
DATA expc<>+416(SB)/4, $0x3d2aaaab
DATA expc<>+420(SB)/4, $0x3d2aaaab
DATA expc<>+424(SB)/4, $0x3d2aaaab
DATA expc<>+428(SB)/4, $0x3d2aaaab
DATA expc<>+432(SB)/4, $0x3d2aaaab
DATA expc<>+436(SB)/4, $0x3d2aaaab
DATA expc<>+440(SB)/4, $0x3d2aaaab
DATA expc<>+444(SB)/4, $0x3d2aaaab
DATA expc<>+448(SB)/4, $0x3e2aaaab
DATA expc<>+452(SB)/4, $0x3e2aaaab
DATA expc<>+456(SB)/4, $0x3e2aaaab
DATA expc<>+460(SB)/4, $0x3e2aaaab
DATA expc<>+464(SB)/4, $0x3e2aaaab
DATA expc<>+468(SB)/4, $0x3e2aaaab
DATA expc<>+472(SB)/4, $0x3e2aaaab
DATA expc<>+476(SB)/4, $0x3e2aaaab
DATA expc<>+480(SB)/4, $0x3e2aaaab
DATA expc<>+484(SB)/4, $0x3e2aaaab
DATA expc<>+488(SB)/4, $0x3e2aaaab
DATA expc<>+492(SB)/4, $0x3e2aaaab
DATA expc<>+496(SB)/4, $0x3e2aaaab
DATA expc<>+500(SB)/4, $0x3e2aaaab
DATA expc<>+504(SB)/4, $0x3e2aaaab
DATA expc<>+508(SB)/4, $0x3e2aaaab
DATA expc<>+512(SB)/4, $0x3f000000
DATA expc<>+516(SB)/4, $0x3f000000
DATA expc<>+520(SB)/4, $0x3f000000
DATA expc<>+524(SB)/4, $0x3f000000
DATA expc<>+528(SB)/4, $0x3f000000
DATA expc<>+532(SB)/4, $0x3f000000
DATA expc<>+536(SB)/4, $0x3f000000
DATA expc<>+540(SB)/4, $0x3f000000
DATA expc<>+544(SB)/4, $0x3f000000
DATA expc<>+548(SB)/4, $0x3f000000
DATA expc<>+552(SB)/4, $0x3f000000
DATA expc<>+556(SB)/4, $0x3f000000
DATA expc<>+560(SB)/4, $0x3f000000
DATA expc<>+564(SB)/4, $0x3f000000
DATA expc<>+568(SB)/4, $0x3f000000
DATA expc<>+572(SB)/4, $0x3f000000
DATA expc<>+576(SB)/4, $0x3f800000
DATA expc<>+580(SB)/4, $0x3f800000
DATA expc<>+584(SB)/4, $0x3f800000
DATA expc<>+588(SB)/4, $0x3f800000
DATA expc<>+592(SB)/4, $0x3f800000
DATA expc<>+596(SB)/4, $0x3f800000
DATA expc<>+600(SB)/4, $0x3f800000
DATA expc<>+604(SB)/4, $0x3f800000
DATA expc<>+608(SB)/4, $0x3f800000
DATA expc<>+612(SB)/4, $0x3f800000
DATA expc<>+616(SB)/4, $0x3f800000
DATA expc<>+620(SB)/4, $0x3f800000
DATA expc<>+624(SB)/4, $0x3f800000
DATA expc<>+628(SB)/4, $0x3f800000
DATA expc<>+632(SB)/4, $0x3f800000
DATA expc<>+636(SB)/4, $0x3f800000
DATA expc<>+640(SB)/4, $0x42b17217
DATA expc<>+644(SB)/4, $0x42b17217
DATA expc<>+648(SB)/4, $0x42b17217
DATA expc<>+652(SB)/4, $0x42b17217
DATA expc<>+656(SB)/4, $0x42b17217
DATA expc<>+660(SB)/4, $0x42b17217
DATA expc<>+664(SB)/4, $0x42b17217
DATA expc<>+668(SB)/4, $0x42b17217
DATA expc<>+672(SB)/4, $0x42b17217
DATA expc<>+676(SB)/4, $0x42b17217
DATA expc<>+680(SB)/4, $0x42b17217
DATA expc<>+684(SB)/4, $0x42b17217
DATA expc<>+688(SB)/4, $0x42b17217
DATA expc<>+692(SB)/4, $0x42b17217
DATA expc<>+696(SB)/4, $0x42b17217
DATA expc<>+700(SB)/4, $0x42b17217
DATA expc<>+704(SB)/4, $0xc2aeac4f
DATA expc<>+708(SB)/4, $0xc2aeac4f
DATA expc<>+712(SB)/4, $0xc2aeac4f
DATA expc<>+716(SB)/4, $0xc2aeac4f
DATA expc<>+720(SB)/4, $0xc2aeac4f
DATA expc<>+724(SB)/4, $0xc2aeac4f
DATA expc<>+728(SB)/4, $0xc2aeac4f
DATA expc<>+732(SB)/4, $0xc2aeac4f
DATA expc<>+736(SB)/4, $0xc2aeac4f
DATA expc<>+740(SB)/4, $0xc2aeac4f
DATA expc<>+744(SB)/4, $0xc2aeac4f
DATA expc<>+748(SB)/4, $0xc2aeac4f
DATA expc<>+752(SB)/4, $0xc2aeac4f
DATA expc<>+756(SB)/4, $0xc2aeac4f
DATA expc<>+760(SB)/4, $0xc2aeac4f
DATA expc<>+764(SB)/4, $0xc2aeac4f
DATA expc<>+768(SB)/4, $0x80000000
DATA expc<>+772(SB)/4, $0x80000000
DATA expc<>+776(SB)/4, $0x80000000
DATA expc<>+780(SB)/4, $0x80000000
DATA expc<>+784(SB)/4, $0x80000000
DATA expc<>+788(SB)/4, $0x80000000
DATA expc<>+792(SB)/4, $0x80000000
DATA expc<>+796(SB)/4, $0x80000000
DATA expc<>+800(SB)/4, $0x80000000
DATA expc<>+804(SB)/4, $0x80000000
DATA expc<>+808(SB)/4, $0x80000000
DATA expc<>+812(SB)/4, $0x80000000
DATA expc<>+816(SB)/4, $0x80000000
DATA expc<>+820(SB)/4, $0x80000000
DATA expc<>+824(SB)/4, $0x80000000
DATA expc<>+828(SB)/4, $0x80000000
DATA expc<>+832(SB)/4, $0x0000007f
DATA expc<>+836(SB)/4, $0x0000007f
DATA expc<>+840(SB)/4, $0x0000007f
DATA expc<>+844(SB)/4, $0x0000007f
DATA expc<>+848(SB)/4, $0x0000007f
DATA expc<>+852(SB)/4, $0x0000007f
DATA expc<>+856(SB)/4, $0x0000007f
DATA expc<>+860(SB)/4, $0x0000007f
DATA expc<>+864(SB)/4, $0x0000007f
DATA expc<>+868(SB)/4, $0x0000007f
DATA expc<>+872(SB)/4, $0x0000007f
DATA expc<>+876(SB)/4, $0x0000007f
DATA expc<>+880(SB)/4, $0x0000007f
DATA expc<>+884(SB)/4, $0x0000007f
DATA expc<>+888(SB)/4, $0x0000007f
DATA expc<>+892(SB)/4, $0x0000007f
DATA expc<>+896(SB)/4, $0x7f800000
DATA expc<>+900(SB)/4, $0x7f800000
DATA expc<>+904(SB)/4, $0x7f800000
DATA expc<>+908(SB)/4, $0x7f800000
DATA expc<>+912(SB)/4, $0x7f800000
DATA expc<>+916(SB)/4, $0x7f800000
DATA expc<>+920(SB)/4, $0x7f800000
DATA expc<>+924(SB)/4, $0x7f800000
DATA expc<>+928(SB)/4, $0x7f800000
DATA expc<>+932(SB)/4, $0x7f800000
DATA expc<>+936(SB)/4, $0x7f800000
DATA expc<>+940(SB)/4, $0x7f800000
DATA expc<>+944(SB)/4, $0x7f800000
DATA expc<>+948(SB)/4, $0x7f800000
DATA expc<>+952(SB)/4, $0x7f800000
DATA expc<>+956(SB)/4, $0x7f800000
GLOBL expc<>(SB), RODATA|NOPTR, $960

// func expAffineAVX512(dst, src *float32, n int, scale, b1, b2 float32)
// n is a positive multiple of 16. The operations are expf's, in its order, with no fused
// multiply-add: every lane equals expf(src·scale + b1 + b2) bit for bit.
TEXT ·expAffineAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z16
	VBROADCASTSS b1+28(FP), Z17
	VBROADCASTSS b2+32(FP), Z18
	VMOVUPS expc<>+0(SB), Z19
	VMOVUPS expc<>+64(SB), Z20
	VMOVUPS expc<>+128(SB), Z21
	VMOVUPS expc<>+192(SB), Z22
	VMOVUPS expc<>+256(SB), Z23
	VMOVUPS expc<>+320(SB), Z24
	VMOVUPS expc<>+384(SB), Z25
	VMOVUPS expc<>+448(SB), Z26
	VMOVUPS expc<>+512(SB), Z27
	VMOVUPS expc<>+768(SB), Z28
	VMOVUPS expc<>+576(SB), Z29
	VMOVUPS expc<>+832(SB), Z30
	VMOVUPS expc<>+640(SB), Z31
	VMOVUPS expc<>+704(SB), Z14
	VMOVUPS expc<>+896(SB), Z15

avx512loop:
	VMOVUPS (SI), Z0
	VMULPS Z16, Z0, Z0
	VADDPS Z17, Z0, Z0
	VADDPS Z18, Z0, Z0 // x
	VMULPS Z19, Z0, Z1 // t = x·log2e
	VPANDD Z28, Z1, Z2
	VPORD Z27, Z2, Z2
	VADDPS Z2, Z1, Z1 // t ± 0.5
	VCVTTPS2DQ Z1, Z1 // n
	VCVTDQ2PS Z1, Z2 // fn
	VMULPS Z20, Z2, Z3
	VSUBPS Z3, Z0, Z3 // x − fn·ln2hi
	VMULPS Z21, Z2, Z4
	VSUBPS Z4, Z3, Z3 // r
	VMULPS Z22, Z3, Z4
	VADDPS Z23, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z24, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z25, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z26, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z27, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z29, Z4, Z4
	VMULPS Z3, Z4, Z4
	VADDPS Z29, Z4, Z4 // p
	VPSRAD $1, Z1, Z5 // 2ⁿ as 2^(n>>1)·2^(n−n>>1): both normal for every n in range
	VPSUBD Z5, Z1, Z6
	VPADDD Z30, Z5, Z5
	VPADDD Z30, Z6, Z6
	VPSLLD $23, Z5, Z5
	VPSLLD $23, Z6, Z6
	VMULPS Z5, Z4, Z4
	VMULPS Z6, Z4, Z4
	VCMPPS $0x1e, Z31, Z0, K1 // x > hi: +Inf
	VMOVAPS Z15, K1, Z4
	VCMPPS $0x11, Z14, Z0, K2 // x < lo: 0
	VPXORD Z4, Z4, K2, Z4
	VCMPPS $0x03, Z0, Z0, K3 // NaN: x
	VMOVAPS Z0, K3, Z4
	VMOVUPS Z4, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ avx512loop
	VZEROUPPER
	RET

// func expAffineAVX2(dst, src *float32, n int, scale, b1, b2 float32)
// n is a positive multiple of 8; as expAffineAVX512, 8 lanes at a time.
TEXT ·expAffineAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y13
	VBROADCASTSS b1+28(FP), Y14
	VBROADCASTSS b2+32(FP), Y15
	VMOVUPS expc<>+896(SB), Y8
	VMOVUPS expc<>+576(SB), Y9
	VMOVUPS expc<>+512(SB), Y10
	VMOVUPS expc<>+832(SB), Y11

avx2loop:
	VMOVUPS (SI), Y0
	VMULPS Y13, Y0, Y0
	VADDPS Y14, Y0, Y0
	VADDPS Y15, Y0, Y0 // x
	VMULPS expc<>+0(SB), Y0, Y1
	VANDPS expc<>+768(SB), Y1, Y2
	VORPS Y10, Y2, Y2
	VADDPS Y2, Y1, Y1
	VCVTTPS2DQ Y1, Y1 // n
	VCVTDQ2PS Y1, Y2 // fn
	VMULPS expc<>+64(SB), Y2, Y3
	VSUBPS Y3, Y0, Y3
	VMULPS expc<>+128(SB), Y2, Y4
	VSUBPS Y4, Y3, Y3 // r
	VMULPS expc<>+192(SB), Y3, Y4
	VADDPS expc<>+256(SB), Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS expc<>+320(SB), Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS expc<>+384(SB), Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS expc<>+448(SB), Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS Y10, Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS Y9, Y4, Y4
	VMULPS Y3, Y4, Y4
	VADDPS Y9, Y4, Y4 // p
	VPSRAD $1, Y1, Y5
	VPSUBD Y5, Y1, Y6
	VPADDD Y11, Y5, Y5
	VPADDD Y11, Y6, Y6
	VPSLLD $23, Y5, Y5
	VPSLLD $23, Y6, Y6
	VMULPS Y5, Y4, Y4
	VMULPS Y6, Y4, Y4
	VCMPPS $0x1e, expc<>+640(SB), Y0, Y7 // x > hi: +Inf
	VBLENDVPS Y7, Y8, Y4, Y4
	VCMPPS $0x11, expc<>+704(SB), Y0, Y7 // x < lo: 0
	VANDNPS Y4, Y7, Y4
	VCMPPS $0x03, Y0, Y0, Y7 // NaN: x
	VBLENDVPS Y7, Y0, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ avx2loop
	VZEROUPPER
	RET

// func expSumAVX2(src *float32, n int, scale, b1 float32, acc *[8]float64)
// n is a positive multiple of 16. Adds expf(src[j]·scale + b1 + 0) (expAffine's value, bit for
// bit: expAffineAVX2's operations) as float64 into acc[j mod 8], j in order. Two vectors at a
// time, their operations interleaved: one vector's exp is a chain of dependent operations.
TEXT ·expSumAVX2(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y12
	VBROADCASTSS b1+20(FP), Y13
	MOVQ acc+24(FP), DI
	VXORPS Y14, Y14, Y14 // b2 = 0
	VMOVUPD (DI), Y10 // acc[0..3]
	VMOVUPD 32(DI), Y11 // acc[4..7]
	VMOVUPS expc<>+512(SB), Y15 // 0.5

sumloop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y5
	VMULPS Y12, Y0, Y0
	VMULPS Y12, Y5, Y5
	VADDPS Y13, Y0, Y0
	VADDPS Y13, Y5, Y5
	VADDPS Y14, Y0, Y0 // x (b2 = 0)
	VADDPS Y14, Y5, Y5 // x (b2 = 0)
	VMULPS expc<>+0(SB), Y0, Y1
	VMULPS expc<>+0(SB), Y5, Y6
	VANDPS expc<>+768(SB), Y1, Y2
	VANDPS expc<>+768(SB), Y6, Y7
	VORPS Y15, Y2, Y2
	VORPS Y15, Y7, Y7
	VADDPS Y2, Y1, Y1
	VADDPS Y7, Y6, Y6
	VCVTTPS2DQ Y1, Y1 // n
	VCVTTPS2DQ Y6, Y6 // n
	VCVTDQ2PS Y1, Y2 // fn
	VCVTDQ2PS Y6, Y7 // fn
	VMULPS expc<>+64(SB), Y2, Y3
	VMULPS expc<>+64(SB), Y7, Y8
	VSUBPS Y3, Y0, Y3
	VSUBPS Y8, Y5, Y8
	VMULPS expc<>+128(SB), Y2, Y2
	VMULPS expc<>+128(SB), Y7, Y7
	VSUBPS Y2, Y3, Y3 // r
	VSUBPS Y7, Y8, Y8 // r
	VMULPS expc<>+192(SB), Y3, Y4
	VMULPS expc<>+192(SB), Y8, Y9
	VADDPS expc<>+256(SB), Y4, Y4
	VADDPS expc<>+256(SB), Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS expc<>+320(SB), Y4, Y4
	VADDPS expc<>+320(SB), Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS expc<>+384(SB), Y4, Y4
	VADDPS expc<>+384(SB), Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS expc<>+448(SB), Y4, Y4
	VADDPS expc<>+448(SB), Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS Y15, Y4, Y4
	VADDPS Y15, Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS expc<>+576(SB), Y4, Y4
	VADDPS expc<>+576(SB), Y9, Y9
	VMULPS Y3, Y4, Y4
	VMULPS Y8, Y9, Y9
	VADDPS expc<>+576(SB), Y4, Y4 // p
	VADDPS expc<>+576(SB), Y9, Y9 // p
	VPSRAD $1, Y1, Y2
	VPSRAD $1, Y6, Y7
	VPSUBD Y2, Y1, Y1
	VPSUBD Y7, Y6, Y6
	VPADDD expc<>+832(SB), Y2, Y2
	VPADDD expc<>+832(SB), Y7, Y7
	VPADDD expc<>+832(SB), Y1, Y1
	VPADDD expc<>+832(SB), Y6, Y6
	VPSLLD $23, Y2, Y2
	VPSLLD $23, Y7, Y7
	VPSLLD $23, Y1, Y1
	VPSLLD $23, Y6, Y6
	VMULPS Y2, Y4, Y4
	VMULPS Y7, Y9, Y9
	VMULPS Y1, Y4, Y4
	VMULPS Y6, Y9, Y9
	VCMPPS $0x1e, expc<>+640(SB), Y0, Y2 // x > hi: +Inf
	VCMPPS $0x1e, expc<>+640(SB), Y5, Y7 // x > hi: +Inf
	VBLENDVPS Y2, expc<>+896(SB), Y4, Y4
	VBLENDVPS Y7, expc<>+896(SB), Y9, Y9
	VCMPPS $0x11, expc<>+704(SB), Y0, Y2 // x < lo: 0
	VCMPPS $0x11, expc<>+704(SB), Y5, Y7 // x < lo: 0
	VANDNPS Y4, Y2, Y4
	VANDNPS Y9, Y7, Y9
	VCMPPS $0x03, Y0, Y0, Y2 // NaN: x
	VCMPPS $0x03, Y5, Y5, Y7 // NaN: x
	VBLENDVPS Y2, Y0, Y4, Y4
	VBLENDVPS Y7, Y5, Y9, Y9
	VCVTPS2PD X4, Y1
	VCVTPS2PD X9, Y6
	VEXTRACTF128 $1, Y4, X2
	VEXTRACTF128 $1, Y9, X7
	VCVTPS2PD X2, Y2
	VCVTPS2PD X7, Y7
	VADDPD Y1, Y10, Y10
	VADDPD Y2, Y11, Y11
	VADDPD Y6, Y10, Y10
	VADDPD Y7, Y11, Y11
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ sumloop
	VMOVUPD Y10, (DI)
	VMOVUPD Y11, 32(DI)
	VZEROUPPER
	RET

// func maxAVX2(src *float32, n int, scale float32, out *[16]float32)
// n is a positive multiple of 32. out[0:8] receives lanes whose largest is the largest
// src[j]·scale that is not NaN (−Inf if none; which zero is unspecified), out[8:16] lanes
// that are not all zero bits if any src[j]·scale is NaN. VMAXPS returns its second source
// (Intel's order; the first here) when either is NaN, so a NaN never enters the maxima.
TEXT ·maxAVX2(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y15
	MOVQ out+24(FP), DI
	VMOVUPS expc<>+896(SB), Y0
	VORPS expc<>+768(SB), Y0, Y0 // −Inf
	VMOVUPS Y0, Y1
	VMOVUPS Y0, Y2
	VMOVUPS Y0, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5

maxloop:
	VMULPS (SI), Y15, Y8
	VMULPS 32(SI), Y15, Y9
	VMULPS 64(SI), Y15, Y10
	VMULPS 96(SI), Y15, Y11
	VMAXPS Y0, Y8, Y0
	VMAXPS Y1, Y9, Y1
	VMAXPS Y2, Y10, Y2
	VMAXPS Y3, Y11, Y3
	VCMPPS $0x03, Y8, Y8, Y8
	VCMPPS $0x03, Y9, Y9, Y9
	VCMPPS $0x03, Y10, Y10, Y10
	VCMPPS $0x03, Y11, Y11, Y11
	VORPS Y8, Y4, Y4
	VORPS Y9, Y5, Y5
	VORPS Y10, Y4, Y4
	VORPS Y11, Y5, Y5
	ADDQ $128, SI
	SUBQ $32, CX
	JNZ maxloop
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VORPS Y5, Y4, Y4
	VMOVUPS Y0, (DI)
	VMOVUPS Y4, 32(DI)
	VZEROUPPER
	RET
