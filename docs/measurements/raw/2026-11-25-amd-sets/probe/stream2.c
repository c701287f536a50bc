// Probe: an Adam-like pass on core 0, alone and while core 1 streams memory or computes.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#include <math.h>
static atomic_int mode, stop, ready;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static size_t other_bytes=16<<20;
static void* other(void*_){pin(1);size_t n=other_bytes/4;float*b=malloc(n*4);for(size_t i=0;i<n;i++)b[i]=i;
  float a[64*64],c[64*64];for(int i=0;i<4096;i++){a[i]=i*1e-3f;c[i]=0;}
  atomic_store(&ready,1);
  while(!atomic_load(&stop)){int m=atomic_load(&mode);
    if(m==1){for(size_t i=0;i<n;i++)b[i]=b[i]*0.999f+1.0f;}
    else if(m==2){for(int r=0;r<64;r++)for(int k=0;k<64;k++){float x=a[r*64+k];for(int j=0;j<64;j++)c[r*64+j]+=x*a[k*64+j];}}
    else {struct timespec t={0,200000};nanosleep(&t,0);} }
  volatile float s=b[7]+c[9];(void)s;return 0;}
int main(int argc,char**argv){size_t n=argc>1?atol(argv[1]):232000;int reps=argc>2?atoi(argv[2]):200; if(argc>3)other_bytes=(size_t)atol(argv[3])<<20;
  pin(0);pthread_t th;pthread_create(&th,0,other,0);while(!atomic_load(&ready));
  float*p=malloc(n*4),*g=malloc(n*4),*m=malloc(n*4),*v=malloc(n*4);for(size_t i=0;i<n;i++){p[i]=1;g[i]=1e-3f*i;m[i]=0;v[i]=0;}
  size_t on=(16<<20)/4;float*o=malloc(on*4);for(size_t i=0;i<on;i++)o[i]=i;
  const char*names[]={"other core idle","other core streaming","other core computing (in cache)"};
  for(int round=0;round<3;round++)for(int md=0;md<3;md++){atomic_store(&mode,md);double*ts=malloc(reps*sizeof(double));
    for(int r=0;r<reps;r++){ for(size_t i=0;i<on;i+=16)o[i]+=1; // evict
      double t0=now();for(size_t i=0;i<n;i++){float gi=g[i];m[i]=0.9f*m[i]+0.1f*gi;v[i]=0.999f*v[i]+0.001f*gi*gi;p[i]-=1e-3f*m[i]/(sqrtf(v[i])+1e-8f);}ts[r]=now()-t0;}
    // median
    for(int i=1;i<reps;i++){double x=ts[i];int j=i-1;while(j>=0&&ts[j]>x){ts[j+1]=ts[j];j--;}ts[j+1]=x;}
    printf("round %d %-34s median %.1f us  p10 %.1f  p90 %.1f\n",round,names[md],ts[reps/2]/1e3,ts[reps/10]/1e3,ts[reps*9/10]/1e3);free(ts);}
  atomic_store(&stop,1);pthread_join(th,0);return 0;}
